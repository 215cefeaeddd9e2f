"""The known mistakes of Chapter 8 (``08_trained_attention``), declared once for both kinds of check.

The exercise notebook's visible checks and the hidden judges (``autograder/judges/trained_attention.py``) name every
mistake from here. Each group says the form of its cases and what ``right`` computes; a visible check passes its
own computation of it, written out by hand, and the judge passes the reference. Where a mistake is the right answer
given other inputs (another head, another axis, the weights of another matrix), it is ``right`` given those inputs;
what no ``right`` can give is written from what the case holds (a map's diagonals, a model's logits, the losses of
the runs a patch compares), never as the exercise's own computation.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping

import torch
import torch.nn.functional as F
from torch import Tensor

from attention_course.testing import KnownMistake, Mistakes

NAN = float("nan")


# ================================================================ attention_entropy
# Cases: (weights (..., T_q, T_k),). right(weights) is one entropy per map, (...).

def _per_query(right: Callable[..., Tensor], w: Tensor) -> Tensor:
    """(..., T_q): each row's entropy, the right answer of every row taken as a map of its own."""
    return right(w.unsqueeze(-2))


def _zero_rows_left_out(right: Callable[..., Tensor], w: Tensor) -> Tensor:
    alive = (w > 0).any(dim=-1).to(w.dtype)  # (..., T_q): rows with some weight
    return (_per_query(right, w) * alive).sum(dim=-1) / alive.sum(dim=-1)


ENTROPY = Mistakes([
    KnownMistake("bits instead of nats", "the entropy is in bits (log base 2); measure it in nats, with the natural "
                 "logarithm", lambda right, w: right(w) / math.log(2)),
    KnownMistake("queries summed, not averaged", lambda w: f"it is summed over the {w.shape[-2]} queries: average the "
                 f"rows' entropies instead", lambda right, w: right(w) * w.shape[-2], when=lambda w: w.shape[-2] > 1),
    KnownMistake("minus sign missing", "it is negative: the entropy is -Σ w ln w, and ln w <= 0 for a weight",
                 lambda right, w: -right(w)),
    KnownMistake("entropy over the wrong axis", "it is the entropy of the columns: a row, one query's weights over "
                 "the keys (the last axis), is the distribution",
                 lambda right, w: right(w.transpose(-2, -1))),
    KnownMistake("keys averaged, not summed", "-w ln w is averaged over the keys: sum it over the keys, then average "
                 "over the queries", lambda right, w: right(w) / w.shape[-1]),
    KnownMistake("normalised entropy", lambda w: f"it is divided by ln T_k = ln {w.shape[-1]}: the chapter's entropy "
                 f"is in nats, not normalised", lambda right, w: right(w) / math.log(w.shape[-1])),
    KnownMistake("queries not averaged", lambda w: f"it gives one entropy per query, {tuple(w.shape[:-1])}: average "
                 f"the rows of each map, to one number per map {tuple(w.shape[:-2])}", _per_query),
])

ENTROPY_ZEROS = Mistakes([  # square maps: the columns' entropies average to the rows' there
    *(m for m in ENTROPY if m.name != "entropy over the wrong axis"),
    KnownMistake("NaN from 0 ln 0", "NaN where a key has weight 0: 0 · ln 0 is NaN in floating point, but the "
                 "entropy takes it as 0 (its limit); use torch.special.xlogy(w, w), or put 0 where the weight is 0 "
                 "before the sum",
                 lambda right, w: torch.where((w == 0).any(dim=-1).any(dim=-1), NAN, right(w)),
                 when=lambda w: bool((w == 0).any())),
    KnownMistake("zero rows left out", "a query whose keys were all masked has entropy 0 and still counts in the "
                 "mean over the queries", _zero_rows_left_out, when=lambda w: bool((w.sum(dim=-1) == 0).any())),
])


# ================================================================ previous_token_score
# Cases: (weights (..., T, T),). right(weights) is one score per map, (...).

PREVIOUS = Mistakes([
    KnownMistake("query 0 counted", lambda w: f"query 0 has no previous token: average w[i, i-1] over the "
                 f"{w.shape[-1] - 1} queries 1..T-1, not over all {w.shape[-1]}",
                 lambda right, w: right(w) * (w.shape[-1] - 1) / w.shape[-1]),
    KnownMistake("the token itself instead of the previous one", "it reads the diagonal, each query's weight on "
                 "itself: the previous token is one key to the left, w[i, i-1], the diagonal below it",
                 lambda right, w: torch.diagonal(w, dim1=-2, dim2=-1).mean(dim=-1)),
    KnownMistake("next token instead of previous", "it reads w[i, i+1], the key after the query; rows are queries, "
                 "columns keys, so the previous token is the diagonal below the main one (offset -1)",
                 lambda right, w: torch.diagonal(w, offset=1, dim1=-2, dim2=-1).mean(dim=-1)),
    KnownMistake("sum instead of mean", "the weights are summed over the queries: average them, to a score between "
                 "0 and 1", lambda right, w: right(w) * (w.shape[-1] - 1), when=lambda w: w.shape[-1] > 2),
])

#: The words each refused call's ValueError must say: maps that are not square, T = 1.
PREVIOUS_REFUSED = [("previous_token_score(weights of shape (2, 4, 6)): 4 queries, 6 keys", ("T",)),
                    ("previous_token_score(weights of shape (3, 1, 1)): T = 1", ("T",))]


# ================================================================ induction_score
# Cases: (weights (..., T, T), period). right(weights, period) is one score per map, (...).

def _from_query_p_minus_1(right: Callable[..., Tensor], w: Tensor, period: int) -> Tensor:
    t = w.shape[-1]
    first = w[..., period - 1, 0]  # query P - 1's weight on key 0, the start of the diagonal
    return (right(w, period) * (t - period) + first) / (t - period + 1)


INDUCTION = Mistakes([
    KnownMistake("the earlier occurrence itself", lambda w, period: f"it reads w[i, i-{period}], the earlier "
                 f"occurrence of the current token itself (a duplicate-token head); an induction head attends the "
                 f"token after it, w[i, i-{period}+1], which comes next",
                 lambda right, w, period: torch.diagonal(w, offset=-period, dim1=-2, dim2=-1).mean(dim=-1)),
    KnownMistake("query P-1 counted", lambda w, period: f"query {period - 1} is still in the first occurrence: it "
                 f"has seen no repeat; average over the queries {period}..{w.shape[-1] - 1}", _from_query_p_minus_1),
    KnownMistake("averaged over every query", lambda w, period: f"the sum over the {w.shape[-1] - period} repeated "
                 f"queries is divided by all {w.shape[-1]}: average over the repeated queries only",
                 lambda right, w, period: right(w, period) * (w.shape[-1] - period) / w.shape[-1]),
    KnownMistake("sum instead of mean", "the weights are summed over the queries: average them, to a score between "
                 "0 and 1", lambda right, w, period: right(w, period) * (w.shape[-1] - period),
                 when=lambda w, period: w.shape[-1] - period > 1),
])

INDUCTION_REFUSED = [("induction_score(weights of shape (2, 6, 6), period=0)", ("period",)),
                     ("induction_score(weights of shape (2, 6, 6), period=6): no query after the period", ("period",)),
                     ("induction_score(weights of shape (5, 8), period=2): 5 queries, 8 keys", ())]


# ================================================================ ablate_head
# Cases: (z (B, n_heads, T, d_head), head) or (z, head, mean). right(z, head[, mean]) is the ablated z.

def _zeroed(z: Tensor, index: tuple) -> Tensor:
    out = z.clone()
    out[index] = 0.0
    return out


def _others(z: Tensor, head: int) -> list[int]:
    return [h for h in range(z.shape[1]) if h != head]


ABLATE = Mistakes([
    KnownMistake("head taken from the wrong axis", lambda z, head, mean=None: f"the slice along axis 2 was replaced: "
                 f"z is (B, n_heads, T, d_head), head {head} is z[:, {head}]",
                 lambda right, z, head, mean=None: _zeroed(z, (slice(None), slice(None), head)),
                 when=lambda z, head, mean=None: head < z.shape[2]),
    KnownMistake("every other head ablated", lambda z, head, mean=None: f"every head but {head} was replaced: "
                 f"ablating head {head} removes that head alone",
                 lambda right, z, head, mean=None: _zeroed(z, (slice(None), _others(z, head)))),
    KnownMistake("heads counted from 1", lambda z, head, mean=None: f"head {(head - 1) % z.shape[1]} was replaced: "
                 f"heads are counted from 0, head {head} is z[:, {head}]",
                 lambda right, z, head, mean=None: right(z, (head - 1) % z.shape[1], *(() if mean is None else
                                                                                      (mean,)))),
])

ABLATE_MEAN = Mistakes([
    KnownMistake("mean ignored", "the head's output became zeros: with `mean` given, the head's slice becomes "
                 "`mean` (mean ablation), broadcast over the batch", lambda right, z, head, mean: right(z, head)),
    KnownMistake("mean added instead of replacing", "`mean` was added to the head's output: it replaces it",
                 lambda right, z, head, mean: z + F.one_hot(torch.tensor(head), z.shape[1]).to(z.dtype)[:, None, None]
                 * mean),
    KnownMistake("mean taken from z", "the head's slice became its average over this batch: `mean` is given, "
                 "computed beforehand over a reference batch; use it",
                 lambda right, z, head, mean: right(z, head, z[:, head].mean(dim=0))),
    *ABLATE,
])

ABLATE_REFUSED = [("ablate_head(z of shape (2, 3, 4, 5), head=3): 3 heads, 0 to 2", ("head",)),
                  ("ablate_head(z of shape (2, 3, 4, 5), head=-1)", ("head",)),
                  ("ablate_head(z of shape (3, 4, 5), head=0): no batch axis", ("(3, 4, 5)",)),
                  ("ablate_head(z of shape (2, 3, 4, 5), head=0, mean of shape (3,)): d_head is 5", ("(3,)",))]


# ================================================================ repeat_loss
# Cases: (logits (B, T, V), tokens (B, T), period), the model's logits in eval mode; the ablated case adds the
# logits with no head ablated and, for mean ablation, with the head zeroed: (logits, tokens, period, intact, zeroed).
# right is not used: every mistake is a loss read from the logits the case holds.

def _scored(logits: Tensor, tokens: Tensor, first: int, shift: int = 1) -> Tensor:
    """The cross-entropy of ``tokens[:, first:]``, each read from the logits ``shift`` positions before it."""
    picked = logits[:, first - shift:logits.shape[1] - shift]
    return F.cross_entropy(picked.flatten(0, 1), tokens[:, first:].flatten())


REPEAT = Mistakes([
    KnownMistake("first repeated token scored", lambda logits, tokens, period, *rest: f"token {period}, the first "
                 f"of the repeat, is scored: nothing before it says that the span repeats there, so only the targets "
                 f"{period + 1}..T-1 can be copied",
                 lambda right, logits, tokens, period, *rest: _scored(logits, tokens, period)),
    KnownMistake("logits not shifted", "the logits at position t scored token t: position t predicts token t + 1, "
                 "so compare logits[:, t - 1] with tokens[:, t]",
                 lambda right, logits, tokens, period, *rest: _scored(logits, tokens, period + 1, 0)),
    KnownMistake("loss over the whole sequence", "it is the loss over the whole sequence: only the repeated part, "
                 "targets P+1..T-1, can be predicted", lambda right, logits, tokens, period, *rest:
                 _scored(logits, tokens, 1)),
])

REPEAT_ABLATED = Mistakes([
    KnownMistake("ablation not applied", "it is the loss with no head ablated: register a forward hook on `site` "
                 "that returns ablate_head(z, head, mean) (a hook's return value replaces the module's output), "
                 "before running the model",
                 lambda right, logits, tokens, period, intact, zeroed: _scored(intact, tokens, period + 1)),
    KnownMistake("mean not passed on", "the head was zeroed although `mean` was given: pass `mean` on to "
                 "ablate_head (and let ablate_head use it)",
                 lambda right, logits, tokens, period, intact, zeroed: _scored(zeroed, tokens, period + 1),
                 when=lambda logits, tokens, period, intact, zeroed: zeroed is not None),
    *REPEAT,
])

TRAINING_MODE = KnownMistake("model run in training mode", "it gave {first:.6g}, then {second:.6g} on the same "
                             "model and tokens: the model ran in training mode, where dropout changes every pass; "
                             "call model.eval() before running it")
HOOK_LEFT = KnownMistake("hook left registered", "{hooks} hook(s) were still registered on the model afterwards: "
                         "remove every hook before returning (handle = site.register_forward_hook(...); "
                         "handle.remove()), in a `finally:` so that it goes even when the model raises")
HOOK_OUTLIVED = KnownMistake("hook left registered", "the model no longer computes what it did: a hook outlived the "
                             "call; remove it before returning, in a `finally:`")
MODE_NOT_RESTORED = KnownMistake("model's mode not given back", "the model was left in {left} mode: give it back in "
                                 "the mode it came in (mode = model.training; ...; model.train(mode))")
NOT_A_LOSS = KnownMistake("not a number", "it returned {got}: return one number, a float or a 0-d tensor")

REPEAT_REFUSED = [("repeat_loss(model, tokens, 5, site) without head", ("head",)),
                  ("repeat_loss(model, tokens, 5, None, 1): a head without a site", ("site",)),
                  ("repeat_loss(model, tokens of shape (2, 6), 5): T = P + 1 leaves no target to copy", ())]


# ================================================================ ov_circuit
# Cases: (model, layer, head), an AttentionOnly model. right(model, layer, head) is the (V, V) circuit.

def _with(model: torch.nn.Module, change: Callable[[torch.nn.Module], None]) -> torch.nn.Module:
    """A copy of ``model`` with ``change`` applied to its weights (the model itself is untouched)."""
    other = copy.deepcopy(model)
    with torch.no_grad():
        change(other)
    return other


def _head_rows(model: torch.nn.Module, layer: int, head: int) -> slice:
    d_head = model.layers[layer].d_head
    return slice(head * d_head, (head + 1) * d_head)


def _o_rows(model: torch.nn.Module, layer: int, head: int) -> None:
    w, rows = model.layers[layer].w_o.weight, _head_rows(model, layer, head)
    w[:, rows] = w[rows, :].T.clone()  # W_O^h read from its rows: what a slice of the wrong axis gives


def _v_columns(model: torch.nn.Module, layer: int, head: int) -> None:
    w, rows = model.layers[layer].w_v.weight, _head_rows(model, layer, head)
    w[rows, :] = w[:, rows].T.clone()


def _tied(model: torch.nn.Module) -> None:
    model.unembed.weight.copy_(model.embed.weight)


def _n_heads(model: torch.nn.Module, layer: int) -> int:
    return model.layers[layer].n_heads


OV = Mistakes([
    KnownMistake("W_O sliced by rows", lambda model, layer, head: f"head {head}'s W_O was taken from rows of "
                 f"w_o.weight: w_o reads head {head}'s output through the *columns* {_head_rows(model, layer, head)} "
                 f"of its weight (out = z Wᵀ), so W_O^h = w_o.weight[:, rows].T",
                 lambda right, model, layer, head: right(_with(model, lambda m: _o_rows(m, layer, head)), layer,
                                                         head)),
    KnownMistake("W_V sliced by columns", lambda model, layer, head: f"head {head}'s W_V was taken from columns of "
                 f"w_v.weight: head {head}'s values are the outputs {_head_rows(model, layer, head)} of w_v, its "
                 f"*rows*, so W_V^h = w_v.weight[rows].T",
                 lambda right, model, layer, head: right(_with(model, lambda m: _v_columns(m, layer, head)), layer,
                                                         head)),
    KnownMistake("every head of the layer", "it is the circuit of the whole layer, every head's W_V W_O: take head "
                 "h's slices of w_v and w_o alone",
                 lambda right, model, layer, head: sum(right(model, layer, h) for h in range(_n_heads(model, layer))),
                 when=lambda model, layer, head: _n_heads(model, layer) > 1),
    KnownMistake("circuit transposed", "it is transposed: row a is the token attended to, and its columns the "
                 "logits that the head raises, so C = W_E W_V W_O W_Uᵀ",
                 lambda right, model, layer, head: right(model, layer, head).T),
    KnownMistake("heads counted from 1", lambda model, layer, head: f"it is the circuit of head "
                 f"{(head - 1) % _n_heads(model, layer)}: heads are counted from 0, head {head}'s slice starts at "
                 f"{head} · d_head", lambda right, model, layer, head: right(model, layer,
                                                                             (head - 1) % _n_heads(model, layer)),
                 when=lambda model, layer, head: _n_heads(model, layer) > 1),
    KnownMistake("embedding used to unembed", "W_U is model.unembed.weight: this model has an unembedding of its "
                 "own (GPT-2 ties the two; this model does not)",
                 lambda right, model, layer, head: right(_with(model, _tied), layer, head)),
])

OV_REFUSED = [("ov_circuit(model, layer=2, head=0): 2 layers, 0 and 1", ("layer",)),
              ("ov_circuit(model, layer=0, head=3): 3 heads, 0 to 2", ("head",)),
              ("ov_circuit(model, layer=1, head=-1)", ("head",))]
MODEL_CHANGED = KnownMistake("model modified", "the model's weights changed during the call: read them, never write "
                             "to them (no in-place operations on a parameter)")


# ================================================================ copying_score
# Cases: (circuit (V, V),). right(circuit) is (share, positivity), two 0-d tensors.

def _positivity(values: Tensor, sizes: Tensor, like: Tensor) -> Tensor:
    return (values.sum() / sizes.sum()).to(like.dtype)


def _share(found: Tensor, like: Tensor) -> Tensor:
    return found.to(like.dtype).mean()


def _eigenvalues(c: Tensor) -> Tensor:
    return torch.linalg.eigvals(c)


COPYING = Mistakes([
    KnownMistake("argmax over the columns", "the share counts the columns whose largest entry is on the diagonal: a "
                 "row, the token attended to, holds the logits it raises; take each row's argmax (dim=-1)",
                 lambda right, c: (_share(c.argmax(dim=0) == torch.arange(c.shape[0]), c), right(c)[1])),
    KnownMistake("positive diagonal counted", "it counts the rows whose diagonal entry is positive: a copying head "
                 "raises the token it attends to *more than any other*, so the diagonal must be the row's largest",
                 lambda right, c: (_share(c.diagonal() > 0, c), right(c)[1])),
    KnownMistake("rows counted, not averaged", lambda c: f"it is the number of rows, out of {c.shape[0]}: the share is "
                 f"a fraction", lambda right, c: (right(c)[0] * c.shape[0], right(c)[1])),
    KnownMistake("real parts' sizes in the denominator", "it divides by Σ |Re λ|: Olsson et al.'s score divides the "
                 "sum of the real parts by the sum of the eigenvalues' moduli, Σ |λ|",
                 lambda right, c: (right(c)[0], _positivity(_eigenvalues(c).real, _eigenvalues(c).real.abs(), c))),
    KnownMistake("eigvalsh on a matrix that is not symmetric", "torch.linalg.eigvalsh assumes a symmetric matrix and "
                 "reads one triangle: an OV circuit is not symmetric; use torch.linalg.eigvals, whose eigenvalues "
                 "may be complex",
                 lambda right, c: (right(c)[0], _positivity(torch.linalg.eigvalsh(c), torch.linalg.eigvalsh(c).abs(),
                                                            c))),
    KnownMistake("singular values instead of eigenvalues", "it divides by the sum of the singular values: the score "
                 "compares eigenvalues with their own moduli, Σ Re λ / Σ |λ|",
                 lambda right, c: (right(c)[0], _positivity(_eigenvalues(c).real, torch.linalg.svdvals(c), c))),
    KnownMistake("positivity not normalised", "it is Σ Re λ, not divided by Σ |λ|: the score lies between -1 and 1",
                 lambda right, c: (right(c)[0], _eigenvalues(c).real.sum().to(c.dtype))),
])

COPYING_REFUSED = [("copying_score(circuit of shape (5, 6))", ("(5, 6)",)),
                   ("copying_score(circuit of shape (4,))", ("(4,)",)),
                   ("copying_score(an integer circuit (3, 3))", ())]


# ================================================================ patch_head
# Cases: (losses,), the losses of repeat_loss on the runs a patch compares: "clean", "corrupted", "patched" (the
# corrupted run with the head's clean output), "zeroed" (the corrupted run with the head zeroed), "layer" (the
# corrupted run with the whole layer's clean output), "noised" (the clean run with the head's corrupted output).
# right is not used: every mistake is a formula of those losses.

def _restored(losses: Mapping[str, float], run: str) -> Tensor:
    gap = losses["corrupted"] - losses["clean"]
    return torch.tensor((losses["corrupted"] - losses[run]) / gap, dtype=torch.float64)


def _number(value: float) -> Tensor:
    return torch.tensor(value, dtype=torch.float64)


PATCH = Mistakes([
    KnownMistake("fraction left instead of restored", "it is the fraction of the gap that is *left* after the patch, "
                 "(L_patched - L_clean) / (L_corrupted - L_clean): the restored fraction is (L_corrupted - "
                 "L_patched) / (L_corrupted - L_clean)", lambda right, losses: 1 - _restored(losses, "patched")),
    KnownMistake("sign flipped", "its sign is flipped: a patch that brings the loss down restores a positive "
                 "fraction, (L_corrupted - L_patched) / (L_corrupted - L_clean)",
                 lambda right, losses: -_restored(losses, "patched")),
    KnownMistake("patched the wrong way round", "the corrupted output was patched into the clean run: patch the "
                 "clean run's output of the head into the corrupted run, and measure how much of the loss it brings "
                 "back", lambda right, losses: 1 - _restored(losses, "noised")),
    KnownMistake("nats instead of a fraction", "it is L_corrupted - L_patched in nats: divide by L_corrupted - "
                 "L_clean, the whole gap, to get the fraction restored",
                 lambda right, losses: _number(losses["corrupted"] - losses["patched"])),
    KnownMistake("divided by the corrupted loss", "it is divided by L_corrupted: the fraction is of the gap between "
                 "the corrupted and the clean loss, L_corrupted - L_clean",
                 lambda right, losses: _number((losses["corrupted"] - losses["patched"]) / losses["corrupted"])),
    KnownMistake("ablated instead of patched", "the head's output was zeroed in the corrupted run: replace it by the "
                 "clean run's output of the same head (ablate_head(z, head, clean_z[:, head]))",
                 lambda right, losses: _restored(losses, "zeroed")),
    KnownMistake("the whole layer patched", "every head of the layer got its clean output: replace head `head`'s "
                 "slice alone, the other heads keep their corrupted output",
                 lambda right, losses: _restored(losses, "layer")),
    KnownMistake("patched with the corrupted output", "nothing changed: the output patched in was recorded from the "
                 "corrupted run; record the head's output on the clean tokens",
                 lambda right, losses: _number(0.0), when=lambda losses: abs(_restored(losses, "patched")) > 1e-4),
])

PATCH_REFUSED = [("patch_head with corrupted equal to clean: the same loss, nothing to restore", ()),
                 ("patch_head with clean (2, 12) and corrupted (2, 10)", ("(2, 12)", "(2, 10)"))]


# ================================================================ concept checks
# heatmap_facts: cases (n_tokens, d_model, n_layers, n_heads, query); largest_term: (weights, value_norms);
# ablation_reading: (intact, without_one, without_all, uniform). right is the reference: these are answers.

HEATMAP = Mistakes([
    KnownMistake("map taken to be T × d_model", lambda n, d, layers, heads, query: f"a head's map has a row per query "
                 f"and a column per key: {n} × {n}, whatever d_model; {n} × {d} is the shape of the layer's output",
                 lambda right, n, d, layers, heads, query: ((n, d), *right(n, d, layers, heads, query)[1:])),
    KnownMistake("a head's output taken for its map", lambda n, d, layers, heads, query: f"{n} × {d // heads} is one "
                 f"head's output, weights times values; its map is {n} × {n}",
                 lambda right, n, d, layers, heads, query: ((n, d // heads), *right(n, d, layers, heads, query)[1:])),
    KnownMistake("one layer's heads only", lambda n, d, layers, heads, query: f"every one of the {layers} layers has "
                 f"its {heads} heads, each with its own map",
                 lambda right, n, d, layers, heads, query: (right(n, d, layers, heads, query)[0], heads, query + 1),
                 when=lambda n, d, layers, heads, query: layers > 1),
    KnownMistake("one map per layer", lambda n, d, layers, heads, query: f"each of the {heads} heads of a layer has "
                 f"its own map; averaging them hides what each does",
                 lambda right, n, d, layers, heads, query: (right(n, d, layers, heads, query)[0], layers, query + 1),
                 when=lambda n, d, layers, heads, query: heads > 1),
    KnownMistake("causal mask forgotten", lambda n, d, layers, heads, query: f"under the causal mask query {query} "
                 f"may attend keys 0..{query} only: the rest of its row is 0",
                 lambda right, n, d, layers, heads, query: (*right(n, d, layers, heads, query)[:2], n),
                 when=lambda n, d, layers, heads, query: query < n - 1),
    KnownMistake("the query's own key left out", lambda n, d, layers, heads, query: f"query {query} may attend its "
                 f"own key too: keys 0..{query} are {query + 1}",
                 lambda right, n, d, layers, heads, query: (*right(n, d, layers, heads, query)[:2], query)),
])

LARGEST_TERM = Mistakes([
    KnownMistake("largest weight taken as the largest term", "that key has the largest weight, not the largest term: "
                 "the head adds Σ_j w_j v_j W_O, and a large weight on a value near zero (an attention sink) moves "
                 "nothing; compare w_j · ‖v_j W_O‖",
                 lambda right, weights, norms: max(range(len(weights)), key=weights.__getitem__)),
    KnownMistake("weights ignored", "that key has the longest value, not the largest term: its weight scales it; "
                 "compare w_j · ‖v_j W_O‖",
                 lambda right, weights, norms: max(range(len(norms)), key=norms.__getitem__)),
])


def _middle(intact: float, uniform: float) -> float:
    return (intact + uniform) / 2


def _against_uniform(intact: float, one: float, every: float, uniform: float) -> str:
    """The reading when a removal costs only once the loss reaches the uniform guess."""
    if every < uniform:
        return "not needed"
    return "each needed" if one >= uniform else "redundant"


ABLATION_READING = Mistakes([  # the uniform-guess threshold first: on some cases it gives another mistake's answer
    KnownMistake("cost measured against the uniform guess", "a removal costs once the loss passes the midpoint "
                 "between the intact loss and the uniform guess, not only once it reaches the uniform guess",
                 lambda right, intact, one, every, uniform: _against_uniform(intact, one, every, uniform)),
    KnownMistake("backup heads", "heads of one layer cannot back each other up: they all read the same residual "
                 "stream at once, so none can see that another was removed. A loss that rises only when all of them "
                 "go says that they are redundant: each adds part of the same job",
                 lambda right, intact, one, every, uniform: "backup",
                 when=lambda intact, one, every, uniform: one < _middle(intact, uniform) <= every),
    KnownMistake("one head's ablation read alone", "removing one head costs little here, but removing all of them "
                 "costs the job: a single-head ablation understates what a kind of head does when the heads are "
                 "redundant", lambda right, intact, one, every, uniform: "not needed",
                 when=lambda intact, one, every, uniform: one < _middle(intact, uniform) <= every),
    KnownMistake("group ablation read alone", "removing all the heads costs the job, but removing one does not: not "
                 "each is needed; together they are", lambda right, intact, one, every, uniform: "each needed",
                 when=lambda intact, one, every, uniform: one < _middle(intact, uniform) <= every),
])
