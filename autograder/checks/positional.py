"""Probes of Chapter 5 (``05_positional_encoding``), judged in :mod:`autograder.judges.positional`.

Every check id is the ``grade_id`` of the test cell that runs it. The cases
are built here from fixed seeds, with plain torch only: the reference is not
in the grading sandbox. Each probe runs the learner's code on them and
returns plain observations.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from autograder.checks.core import (
    Check,
    Observations,
    Raised,
    attempt,
    attempt_facts,
    declare,
    observe_contract,
    probe_answers,
    register,
    seeded,
)

BASE = 10000.0


# ================================================================ shared

def _observe_contract(call: Callable[..., Any], inputs: dict[str, Tensor], seed: int) -> Observations:
    """:func:`core.observe_contract`, plus whether ``call`` passes ``torch.autograd.gradcheck`` on the inputs.

    The output and the torch functions called are not kept: the values have cells of their own, and the
    gradients are judged against the learner's own function.
    """
    obs = observe_contract(call, inputs, seed)
    del obs["out"], obs["called"]
    names = list(inputs)
    leaves = [t.detach().clone().requires_grad_(True) if t.is_floating_point() else t.clone() for t in inputs.values()]
    obs["gradcheck"] = attempt(lambda: torch.autograd.gradcheck(
        lambda *args: call(**dict(zip(names, args, strict=True))), tuple(leaves), raise_exception=False))
    return obs


# ================================================================ sinusoidal_encoding

TABLE_VALUES = declare(Check("sinusoidal_encoding_values", [  # (max_len, d_model, base)
    (6, 4, BASE), (50, 16, BASE), (12, 8, 100.0), (20, 6, BASE), (1, 2, BASE),
]))

_SHAPE_CASES = [(7, 10), (1, 2), (100, 32)]


_PROPERTY_LEN, _PROPERTY_D = 60, 16


def _probe_table_properties(student: Any) -> Observations:
    return {
        "first": attempt(lambda: student(_PROPERTY_LEN, _PROPERTY_D)),
        "again": attempt(lambda: student(_PROPERTY_LEN, _PROPERTY_D)),
        "longer": attempt(lambda: student(2 * _PROPERTY_LEN, _PROPERTY_D)),
    }


TABLE_ERRORS = declare(Check("sinusoidal_encoding_errors", [(10, 7), (6, 5), (0, 8), (5, -2)], key="raised"))


register("sinusoidal_encoding_shape",
         lambda student: {"facts": [attempt_facts(lambda c=c: student(*c)) for c in _SHAPE_CASES]})
register("sinusoidal_encoding_properties", _probe_table_properties)


# ================================================================ SinusoidalPositionalEncoding

SPE_FORWARD = declare(Check("SinusoidalPositionalEncoding_forward", [  # (d_model, max_len, base, x)
    (16, 50, BASE, seeded(3, 7, 16, seed=501)),
    (8, 20, 100.0, seeded(2, 5, 8, seed=502)),
    (8, 12, BASE, seeded(4, 12, 8, seed=503)),  # T == max_len
    (6, 30, BASE, seeded(1, 1, 6, seed=504)),
], call=lambda student, d_model, max_len, base, x: student(d_model, max_len=max_len, base=base)(x)))


def _tensor_facts(pairs: Any) -> list[tuple[str, tuple[int, ...], str, bool]]:
    return [(name, tuple(t.shape), str(t.dtype), bool(t.requires_grad)) for name, t in pairs]


def _module_tensors(module: nn.Module) -> Observations:
    """Names and shapes of a module's parameters, buffers, state_dict entries and plain tensor attributes."""
    attrs = [(name, value) for _, m in module.named_modules() for name, value in vars(m).items()
             if isinstance(value, Tensor) and not isinstance(value, nn.Parameter)]
    return {
        "is_module": isinstance(module, nn.Module),
        "params": _tensor_facts(module.named_parameters()),
        "buffers": _tensor_facts(module.named_buffers()),
        "state": _tensor_facts(module.state_dict(keep_vars=True).items()),
        "attrs": _tensor_facts(attrs),
    }


_BUFFER_D, _BUFFER_LEN = 8, 12


def _probe_spe_buffer(student: Any) -> Observations:
    def facts() -> Observations:
        module = student(_BUFFER_D, max_len=_BUFFER_LEN)
        found = _module_tensors(module)
        found["double"] = _tensor_facts(module.to(torch.float64).named_buffers())
        return found

    try:
        found = facts()
    except Exception as err:
        return {"raised": Raised(type(err).__name__, str(err))}
    found["meta"] = attempt_facts(
        lambda: student(_BUFFER_D, max_len=_BUFFER_LEN).to("meta")(torch.zeros(2, 5, _BUFFER_D, device="meta")))
    return found


_SPE_MAX = (8, 10)  # d_model, max_len


def _probe_spe_max_len(student: Any) -> Observations:
    d, n = _SPE_MAX

    def run(t: int) -> Any:
        return student(d, max_len=n)(seeded(2, t, d, seed=505))

    return {"fits": attempt_facts(lambda: run(n)), "past": attempt(lambda: run(n + 2)),
            "odd": attempt(lambda: student(7, max_len=n)),
            "default": attempt_facts(lambda: student(d)(torch.zeros(1, 5000, d)))}  # max_len defaults to 5000


_SPE_CONTRACT = {"x": seeded(2, 5, 8, seed=506, dtype=torch.float64)}


def _spe_contract_call(cls: Any) -> Callable[..., Any]:
    return lambda x: cls(8, max_len=10)(x)


def _probe_spe_contract(student: Any) -> Observations:
    obs = _observe_contract(_spe_contract_call(student), _SPE_CONTRACT, seed=507)
    obs["bfloat16"] = attempt_facts(lambda: student(8, max_len=10)(seeded(2, 5, 8, seed=508).to(torch.bfloat16)))
    return obs


register("SinusoidalPositionalEncoding_buffer", _probe_spe_buffer)
register("SinusoidalPositionalEncoding_max_len", _probe_spe_max_len)
register("SinusoidalPositionalEncoding_contract", _probe_spe_contract)


# ================================================================ LearnedPositionalEmbedding

def _table_parameter(module: nn.Module, max_len: int, d: int) -> str:
    """The name of the module's trainable ``(max_len, d)`` table; LookupError if there is none."""
    for name, p in module.named_parameters():
        if tuple(p.shape) == (max_len, d):
            return name
    raise LookupError(f"no parameter of shape (max_len, d_model) = ({max_len}, {d}) — keep the table as "
                      f"nn.Embedding(max_len, d_model)")


def _learned_weights(max_len: int, d: int, seed: int) -> Tensor:
    return seeded(max_len, d, seed=seed)


def _learned_module(cls: Any, max_len: int, d: int, seed: int) -> nn.Module:
    module = cls(max_len, d)
    name = _table_parameter(module, max_len, d)
    with torch.no_grad():
        module.get_parameter(name).copy_(_learned_weights(max_len, d, seed))
    return module


def _probe_learned_table(student: Any) -> Observations:
    try:
        return {"facts": _module_tensors(student(12, 8))}
    except Exception as err:
        return {"facts": Raised(type(err).__name__, str(err))}


LEARNED_FORWARD = declare(Check("LearnedPositionalEmbedding_forward", [  # (max_len, d_model, x, seed)
    (12, 8, seeded(3, 5, 8, seed=511), 512),
    (6, 4, seeded(2, 6, 4, seed=513), 514),  # T == max_len
    (20, 16, seeded(1, 1, 16, seed=515), 516),
], call=lambda student, max_len, d, x, seed: _learned_module(student, max_len, d, seed)(x)))


_LEARNED_CONTRACT = {"x": seeded(2, 5, 8, seed=517, dtype=torch.float64),
                     "table": seeded(12, 8, seed=518, dtype=torch.float64)}


def _learned_contract_call(cls: Any) -> Callable[..., Any]:
    """``cls(12, 8)`` in float64 run with ``table`` as its (12, 8) parameter, so gradients reach ``table``."""
    def call(x: Tensor, table: Tensor) -> Any:
        module = cls(12, 8).to(torch.float64)
        name = _table_parameter(module, 12, 8)
        return torch.func.functional_call(module, {name: table}, (x,))

    return call


def _devices_made(build: Callable[[], Any], x: Tensor) -> Any:
    """The devices of every tensor torch's functions make while the module ``build()`` gives runs on ``x``, on the
    meta device: a tensor on the CPU is one built without ``device=x.device``."""
    class Devices(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            seen.update(t.device.type for t in (out if isinstance(out, (tuple, list)) else (out,))
                        if isinstance(t, Tensor))
            return out

    seen: set[str] = set()

    def run() -> list[str]:
        module = build()
        with Devices():
            module(x)
        return sorted(seen)

    return attempt(run)


def _probe_learned_gradients(student: Any) -> Observations:
    """The float64 contract, then the devices of the tensors a forward on the meta device makes."""
    return {**_observe_contract(_learned_contract_call(student), _LEARNED_CONTRACT, seed=519),
            "devices": _devices_made(lambda: student(12, 8).to("meta"), torch.zeros(2, 5, 8, device="meta"))}


def _probe_learned_max_len(student: Any) -> Observations:
    def run(t: int) -> Any:
        return student(10, 8)(seeded(2, t, 8, seed=520))

    return {"fits": attempt_facts(lambda: run(10)), "past": attempt(lambda: run(12))}


register("LearnedPositionalEmbedding_table", _probe_learned_table)
register("LearnedPositionalEmbedding_gradients", _probe_learned_gradients)
register("LearnedPositionalEmbedding_max_len", _probe_learned_max_len)


# ================================================================ apply_rotary

def _rotate(student: Any, x: Tensor, positions: Tensor | None, base: float) -> Any:
    """``apply_rotary(x[, positions][, base=base])``: the arguments a learner's call would leave out, left out."""
    args = (x,) if positions is None else (x, positions)
    return student(*args) if base == BASE else student(*args, base=base)


ROPE_VALUES = declare(Check("apply_rotary_values", [  # (x, positions, base): default positions
    (seeded(2, 5, 8, seed=531), None, BASE),
    (seeded(6, 16, seed=532), None, BASE),
    (seeded(2, 3, 4, 8, seed=533), None, BASE),  # (B, heads, T, d)
    (seeded(4, 6, seed=534), None, 100.0),
], call=_rotate))
ROPE_POSITIONS = declare(Check("apply_rotary_positions", [
    (seeded(2, 5, 8, seed=535), torch.arange(7, 12), BASE),  # the last 5 of 12 positions, as with a cache
    (seeded(2, 4, 8, seed=536), torch.tensor([0.0, 2.5, 5.0, 9.0]), BASE),
    (seeded(2, 3, 5, 8, seed=537), torch.tensor([[0, 1, 2, 3, 4], [3, 4, 5, 6, 7]])[:, None, :], BASE),
], call=_rotate))


_RELATIVE_X = seeded(3, 6, 16, seed=538)
_RELATIVE_Q, _RELATIVE_K = seeded(1, 16, seed=539), seeded(1, 16, seed=540)
_RELATIVE_PAIRS = [(m + n, n) for m in (0, 3, 10) for n in (0, 5, 20)]  # (position of q, position of k)


def _probe_rope_relative(student: Any) -> Observations:
    def scores() -> list[float]:
        out = []
        for m, n in _RELATIVE_PAIRS:
            q = student(_RELATIVE_Q.clone(), torch.tensor([m]))
            k = student(_RELATIVE_K.clone(), torch.tensor([n]))
            out.append(float((q * k).sum()))
        return out

    return {
        "default": attempt(lambda: student(_RELATIVE_X.clone())),
        "zero": attempt(lambda: student(_RELATIVE_X.clone(), torch.zeros(6, dtype=torch.long))),
        "scores": attempt(scores),
    }


_ROPE_CONTRACT = {"x": seeded(2, 4, 6, seed=541, dtype=torch.float64), "positions": torch.tensor([0, 2, 5, 9])}


def _probe_rope_contract(student: Any) -> Observations:
    obs = _observe_contract(student, _ROPE_CONTRACT, seed=542)
    obs["bfloat16"] = attempt_facts(lambda: student(seeded(2, 5, 8, seed=543).to(torch.bfloat16)))
    obs["meta"] = attempt_facts(lambda: student(torch.zeros(2, 5, 8, device="meta")))
    return obs


ROPE_ERRORS = declare(Check("apply_rotary_errors", [(seeded(2, 5, 7, seed=544),), (seeded(2, 2, 3, 5, seed=545),)],
                           key="raised"))  # odd widths, without and with a head axis

register("apply_rotary_relative", _probe_rope_relative)
register("apply_rotary_contract", _probe_rope_contract)


# ================================================================ concept checks

_ENCODED_SHAPE_CASES = [(3, 7, 64), (8, 128, 16), (1, 1, 2)]
_WITHOUT_POSITIONS_CASES = [
    (["a", "b", "a"], ["a", "a", "b"]),
    (["a", "b", "a"], ["a", "b", "b"]),
    (["x", "y", "z", "w"], ["w", "z", "y", "x"]),
    (["the", "cat", "sat"], ["the", "cat", "sat", "down"]),
]

register("encoded_shape_answer", probe_answers(_ENCODED_SHAPE_CASES))
register("same_without_positions_answer", probe_answers(_WITHOUT_POSITIONS_CASES))


# ================================================================ alibi_bias

ALIBI_BIAS_VALUES = declare(Check("alibi_bias_values", [  # (n_heads, T): numbers of heads that are powers of two
    (8, 6), (4, 5), (2, 3), (16, 4), (1, 4), (8, 1),
]))
ALIBI_BIAS_HEADS = declare(Check("alibi_bias_heads", [  # (n_heads, T): numbers of heads that are not
    (6, 4), (12, 3), (3, 5), (5, 2), (24, 2),
]))
ALIBI_BIAS_ERRORS = declare(Check("alibi_bias_errors", [  # (n_heads, T): every case must raise ValueError
    (0, 4), (8, 0), (-2, 3),
], key="raised"))
