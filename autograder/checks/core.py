"""The machinery behind every hidden test: ``run_check(check_id, student_object)``.

A check has two halves:

- ``probe(student)`` runs the learner's code on inputs built from fixed seeds
  and returns *observations*: plain data (tensors detached to the base class,
  numbers, strings, booleans), never the learner's own objects;
- ``judge(observations)`` rebuilds the same inputs, runs the reference from
  :mod:`solutions`, and raises :class:`Mistake` (an ``AssertionError``) whose
  message names the learner's likely mistake.

Today both halves run in the notebook's kernel, one after the other. Because
the judge sees only plain data, it can move to a separate, trusted process
without rewriting a single test cell.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

Observations = dict[str, Any]


class Mistake(AssertionError):
    """A hidden check failed; the message says what is wrong and what to look at."""


@dataclass(frozen=True)
class Check:
    id: str
    probe: Callable[[Any], Observations]
    judge: Callable[[Observations], None]


_REGISTRY: dict[str, Check] = {}


def register(check_id: str, probe: Callable[[Any], Observations], judge: Callable[[Observations], None]) -> None:
    if check_id in _REGISTRY:
        raise ValueError(f"check {check_id!r} is registered twice")
    _REGISTRY[check_id] = Check(check_id, probe, judge)


def get(check_id: str) -> Check:
    _load_all()
    try:
        return _REGISTRY[check_id]
    except KeyError:
        broken = "".join(f"; {name} failed to load: {why}" for name, why in _LOAD_FAILURES.items())
        raise KeyError(f"no hidden check called {check_id!r}{broken}") from None


def ids() -> list[str]:
    _load_all()
    return sorted(_REGISTRY)


_LOADED: set[str] = set()
_LOAD_FAILURES: dict[str, str] = {}


def _load_all() -> None:
    """Import every chapter module of this package once; each registers its checks on import.

    A module that fails to import is recorded, not retried (a retry would
    register its first checks twice), and does not stop the other chapters.
    """
    import importlib
    import pkgutil

    import autograder.checks as package

    for module in pkgutil.iter_modules(package.__path__):
        if module.name == "core" or module.name in _LOADED:
            continue
        _LOADED.add(module.name)
        try:
            importlib.import_module(f"{package.__name__}.{module.name}")
        except Exception as err:  # reported by get() when one of its checks is asked for
            _LOAD_FAILURES[module.name] = f"{type(err).__name__}: {err}"


#: When set (by ``python -m autograder grade`` inside its sandbox), run_check only probes: it appends the
#: observations to this file as JSON lines, and the trusted grader judges them outside the sandbox.
OBSERVATIONS_ENV = "AUTOGRADER_OBSERVATIONS"


def run_check(check_id: str, student: Any) -> None:
    """Probe ``student`` and judge the observations; raise :class:`Mistake` on failure.

    Warnings raised by the learner's code are silenced: nbgrader counts any
    stderr output in a test cell as a failure, and a correct answer that
    triggers a library warning must keep its points. Inside the grading
    sandbox (``$AUTOGRADER_OBSERVATIONS`` set) the observations are recorded
    for the trusted judge instead of being judged here.
    """
    check = get(check_id)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        observations = check.probe(student)
        record_to = os.environ.get(OBSERVATIONS_ENV)
        if record_to:
            with open(record_to, "a", encoding="utf-8") as sink:
                sink.write(json.dumps({"check": check_id, "observations": encode(observations)}) + "\n")
            return
        try:
            check.judge(observations)
        except Mistake as failure:
            # Raise from here, without the judge's frames: the feedback shows the message, not hidden code.
            raise Mistake(str(failure)) from None


# ---------------------------------------------------------------- observing

def seeded(*shape: int, seed: int, dtype: torch.dtype = torch.float32, scale: float = 1.0) -> Tensor:
    """A standard-normal tensor of ``shape`` times ``scale``, reproducible from ``seed``."""
    return torch.randn(tuple(shape), generator=torch.Generator().manual_seed(seed), dtype=dtype) * scale


def seeded_mask(*shape: int, seed: int, p: float = 0.6) -> Tensor:
    """A boolean mask with ``True`` (may attend) with probability ``p``."""
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed)) < p


def plain(x: Any) -> Any:
    """What a probe may keep of a learner's value: plain tensors, numbers, strings, tuples of them.

    A tensor is detached, copied and stripped of any subclass; anything else
    that is not a simple value is kept only as its type name.
    """
    if isinstance(x, Tensor):
        return x.detach().as_subclass(Tensor).clone()
    if isinstance(x, (bool, int, float, str)) or x is None:
        return x
    if isinstance(x, (tuple, list)):
        return tuple(plain(item) for item in x)
    return f"<{type(x).__name__}>"


@dataclass(frozen=True)
class Raised:
    """A probe's record that the learner's code raised instead of returning."""

    type: str
    message: str

    def describe(self) -> str:
        if self.type == "NotImplementedError" and not self.message:
            return "raised NotImplementedError — replace `raise NotImplementedError()` with your code"
        return f"raised {self.type}: {self.message}"


def attempt(call: Callable[[], Any]) -> Any:
    """``plain(call())``, or a :class:`Raised` record if the learner's code raised."""
    try:
        return plain(call())
    except Exception as err:  # the judge decides what a crash means
        return Raised(type(err).__name__, str(err))


def tensor_facts(result: Any) -> Any:
    """What a dtype/device check keeps of a result: a tensor's dtype, device type and shape; else ``plain``."""
    if isinstance(result, Tensor):
        return {"dtype": str(result.dtype), "device": result.device.type, "shape": tuple(result.shape)}
    return plain(result)


def attempt_facts(call: Callable[[], Any]) -> Any:
    """``tensor_facts(call())``, or a :class:`Raised` record if the learner's code raised."""
    try:
        return tensor_facts(call())
    except Exception as err:  # the judge decides what a crash means
        return Raised(type(err).__name__, str(err))


class _CallRecorder(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        self.names.add(getattr(func, "__name__", str(func)))
        kwargs = kwargs or {}
        return func(*args, **kwargs)


@contextmanager
def recording_torch_calls() -> Iterator[set[str]]:
    """Record the name of every torch function called inside the block, however it was imported."""
    recorder = _CallRecorder()
    with recorder:
        yield recorder.names


def observe_contract(call: Callable[..., Any], inputs: dict[str, Tensor], seed: int) -> Observations:
    """Observe what a contract check needs of ``call(**inputs)``, on float64 inputs.

    First a plain call on copies: which inputs it modified in place. Then a call
    on copies that require gradients: the first output (``out``), its dtype,
    the torch functions called, and the gradient of ``<out, g>`` for a seeded
    ``g`` with respect to each floating input (``None`` where none arrived).
    """
    copies = {name: t.clone() for name, t in inputs.items()}
    first = attempt(lambda: call(**copies))
    obs: Observations = {
        "modified": sorted(name for name, t in copies.items() if not torch.equal(t, inputs[name])),
        "raised": first if isinstance(first, Raised) else None,
    }
    leaves = {
        name: (t.detach().clone().requires_grad_(True) if t.is_floating_point() else t.clone())
        for name, t in inputs.items()
    }
    grads: dict[str, Any] = {name: None for name, t in leaves.items() if t.is_floating_point()}
    obs.update(out=None, out_dtype=None, requires_grad=False, called=[], grads=grads)
    if obs["raised"] is not None:
        return obs
    try:
        with recording_torch_calls() as called:
            result = call(**leaves)
        out = result[0] if isinstance(result, (tuple, list)) else result
        obs.update(
            out=plain(out),
            out_dtype=str(out.dtype) if isinstance(out, Tensor) else None,
            called=sorted(called),
            requires_grad=bool(isinstance(out, Tensor) and out.requires_grad),
        )
        if obs["requires_grad"]:
            cotangent = seeded(*out.shape, seed=seed, dtype=out.dtype)
            found = torch.autograd.grad((out * cotangent).sum(), [leaves[n] for n in grads], allow_unused=True)
            obs["grads"] = {name: plain(g) for name, g in zip(grads, found)}
    except Exception as err:
        obs["raised"] = Raised(type(err).__name__, str(err))
    return obs


# ---------------------------------------------------------------- plain data on the wire

def encode(value: Any) -> Any:
    """Observations as JSON-ready data: tensors become {dtype, shape, data}; nothing is pickled."""
    if isinstance(value, Tensor):
        t = value.detach().as_subclass(Tensor).cpu()
        data = t.to(torch.float64).tolist() if t.is_floating_point() else t.tolist()
        return {"__tensor__": str(t.dtype).removeprefix("torch."), "shape": list(t.shape), "data": _finite(data)}
    if isinstance(value, Raised):
        return {"__raised__": [value.type, value.message]}
    if isinstance(value, tuple):
        return {"__tuple__": [encode(v) for v in value]}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {str(k): encode(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return _finite(value)
    return f"<{type(value).__name__}>"


def _finite(data: Any) -> Any:
    if isinstance(data, list):
        return [_finite(d) for d in data]
    if isinstance(data, float) and not math.isfinite(data):
        return {"__float__": repr(data)}  # nan, inf, -inf: JSON has no literal for them
    return data


_DTYPES = {name: getattr(torch, name) for name in (
    "float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool", "complex64")}


def decode(value: Any) -> Any:
    """The inverse of :func:`encode`, for data read from an untrusted file: refuses anything unexpected."""
    if isinstance(value, list):
        return [decode(v) for v in value]
    if isinstance(value, dict):
        if "__tensor__" in value:
            dtype = _DTYPES.get(value["__tensor__"])
            if dtype is None:
                raise ValueError(f"unknown dtype {value['__tensor__']!r} in observations")
            data = _unfinite(value["data"])
            tensor = torch.tensor(data, dtype=torch.float64 if dtype.is_floating_point else dtype)
            return tensor.to(dtype).reshape([int(n) for n in value["shape"]])
        if "__raised__" in value:
            kind, message = value["__raised__"]
            return Raised(str(kind), str(message))
        if "__tuple__" in value:
            return tuple(decode(v) for v in value["__tuple__"])
        if "__float__" in value:
            return float(value["__float__"])
        return {str(k): decode(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise ValueError(f"unexpected {type(value).__name__} in observations")


def _unfinite(data: Any) -> Any:
    if isinstance(data, list):
        return [_unfinite(d) for d in data]
    if isinstance(data, dict):
        return float(data["__float__"])
    return data


def judge_recorded(check_id: str, encoded: Any) -> None:
    """Judge observations recorded in the sandbox (trusted side); raise :class:`Mistake` on failure."""
    check = get(check_id)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check.judge(decode(encoded))


# ---------------------------------------------------------------- judging

@dataclass(frozen=True)
class Suspect:
    """A likely mistake: ``produce()`` computes what that mistake would return on the same inputs."""

    message: str
    produce: Callable[[], Tensor]


def _close(a: Tensor, b: Tensor, atol: float, rtol: float) -> bool:
    if a.shape != b.shape:
        return False
    return torch.allclose(a.to(torch.float64), b.to(torch.float64), atol=atol, rtol=rtol, equal_nan=True)


def matching_suspect(actual: Tensor, suspects: Iterable[Suspect], atol: float, rtol: float) -> Suspect | None:
    for suspect in suspects:
        try:
            candidate = suspect.produce()
        except Exception:  # a mistake that would crash on these inputs cannot be what happened
            continue
        if isinstance(candidate, Tensor) and _close(actual, candidate.detach(), atol, rtol):
            return suspect
    return None


def judge_cases(pairs: Iterable[tuple[Any, Callable[[Any], None]]]) -> None:
    """Judge ``(observation, judge)`` pairs: the cases that ran first, then report the first crash.

    A mistake that crashes on one shape but runs on another is then named from
    the case where it ran, rather than reported as a bare exception.
    """
    pairs = list(pairs)
    for observed, judge in pairs:
        if not isinstance(observed, Raised):
            judge(observed)
    for observed, judge in pairs:
        if isinstance(observed, Raised):
            judge(observed)


def first_index(found: Tensor) -> tuple[int, ...]:
    """The index of the first True entry of ``found``."""
    return tuple(int(i) for i in found.nonzero()[0])


def same_values(a: Tensor, e: Tensor) -> Tensor:
    """Where ``a`` equals ``e`` exactly, NaN matching NaN (and equal infinities, which subtract to NaN)."""
    return (a == e) | (torch.isnan(a) & torch.isnan(e))


def judge_tensor(
    actual: Any,
    expected: Tensor,
    what: str,
    suspects: Iterable[Suspect] = (),
    hint: str = "",
    atol: float = 1e-5,
    rtol: float = 1e-4,
) -> None:
    """Raise :class:`Mistake` unless ``actual`` matches ``expected``; name the mistake when a suspect matches."""
    suspects = list(suspects)
    tail = f" — {hint}" if hint else ""
    if isinstance(actual, Raised):
        raise Mistake(f"{what} {actual.describe()}")
    if not isinstance(actual, Tensor):
        extra = " — did you forget to `return` it?" if actual is None else ""
        raise Mistake(f"{what} should be a tensor of shape {tuple(expected.shape)}, got {actual!r}{extra}")
    if _close(actual, expected, atol, rtol):
        return
    suspect = matching_suspect(actual, suspects, atol, rtol)
    if suspect is not None:
        raise Mistake(f"{what}: {suspect.message}")
    if actual.shape != expected.shape:
        raise Mistake(f"{what} has shape {tuple(actual.shape)}, expected {tuple(expected.shape)}{tail}")
    if torch.isnan(actual).any() and not torch.isnan(expected).any():
        first = first_index(torch.isnan(actual))
        raise Mistake(f"{what} contains NaN (first at index {first}) where a number was expected{tail}")
    a, e = actual.to(torch.float64), expected.to(torch.float64)
    diff = torch.where(same_values(a, e), torch.zeros_like(a), (a - e).abs().nan_to_num(float("inf")))
    where = first_index(diff == diff.max())
    raise Mistake(
        f"{what}: at index {where} got {actual[where].item():.6g}, expected {expected[where].item():.6g}{tail}"
    )


def judge_contract(
    obs: Observations,
    reference: Callable[..., Any],
    inputs: dict[str, Tensor],
    seed: int,
    function: str,
    forbidden: dict[str, str] | None = None,
) -> None:
    """Judge what :func:`observe_contract` recorded: no forbidden calls, dtype kept, inputs untouched, gradients."""
    for name, message in (forbidden or {}).items():
        if name in obs["called"]:
            raise Mistake(f"{function} calls torch's `{name}` — {message}")
    if obs["modified"] or (obs["raised"] is not None and "in-place" in obs["raised"].message):
        names = ", ".join(f"`{n}`" for n in obs["modified"]) or "(a tensor that requires grad)"
        raise Mistake(
            f"{function} modified its input {names} in place — use out-of-place operations "
            f"(`q = q / s`, not `q /= s`; `masked_fill`, not `masked_fill_`)"
        )
    if obs["raised"] is not None:
        raise Mistake(f"{function} on float64 inputs {obs['raised'].describe()}")
    if obs["out_dtype"] is not None and obs["out_dtype"] != "torch.float64":
        raise Mistake(
            f"{function} returned {obs['out_dtype']} for float64 inputs — keep the input's dtype "
            f"(no `.float()`, no hard-coded `dtype=torch.float32`)"
        )
    if not obs["requires_grad"]:
        raise Mistake(
            f"{function}'s output is cut off from the graph (requires_grad is False) — avoid `.detach()`, "
            f"`.item()`, `.numpy()`, `torch.tensor(...)` of results and `torch.no_grad()`"
        )
    leaves = {
        name: (t.detach().clone().requires_grad_(True) if t.is_floating_point() else t.clone())
        for name, t in inputs.items()
    }
    result = reference(**leaves)
    out = result[0] if isinstance(result, (tuple, list)) else result
    judge_tensor(obs["out"], out.detach(), f"{function}'s output on float64 inputs", atol=1e-9, rtol=1e-7)
    floating = {name: t for name, t in leaves.items() if t.is_floating_point()}
    cotangent = seeded(*out.shape, seed=seed, dtype=out.dtype)
    expected = torch.autograd.grad((out * cotangent).sum(), list(floating.values()), allow_unused=True)
    for (name, _), want in zip(floating.items(), expected):
        got = obs["grads"].get(name)
        if want is None:
            continue
        if got is None:
            raise Mistake(
                f"no gradient reaches `{name}` through {function} — something detaches it "
                f"(`.detach()`, `.data`, `.item()`, `.numpy()`, or building a new tensor from results)"
            )
        judge_tensor(got, want, f"the gradient of {function} with respect to `{name}`", atol=1e-8, rtol=1e-6,
                     hint="a NaN gradient on a fully masked row comes from a 0/0 or an exp(-inf - -inf) that "
                     "torch.where or nan_to_num hides in the forward pass but not in the backward pass; make the "
                     "values safe before the operation, not after")


# ---------------------------------------------------------------- shared by the chapters

def judge_value_error(raised: Any, what: str, must_mention: tuple[str, ...], mistake: str = "") -> None:
    """``raised`` is what a probe's :func:`attempt` returned for a call that must raise ValueError naming
    ``must_mention``; ``mistake`` is the short name of the mistake, added to the message when given."""
    label = f" ({mistake})" if mistake else ""
    if not isinstance(raised, Raised):
        raise Mistake(f"{what} should raise ValueError with a clear message, but nothing was raised{label}")
    if raised.type != "ValueError":
        raise Mistake(f"{what} {raised.describe()}; check the arguments first and raise ValueError with a "
                      f"message that names the shapes or dtypes involved{label}")
    missing = [word for word in must_mention if word.lower() not in raised.message.lower()]
    if missing:
        raise Mistake(f"{what}: the ValueError should mention {missing}; its message was {raised.message!r}")


def linear_facts(layer: Any) -> dict[str, Any]:
    if not isinstance(layer, nn.Linear):
        return {"type": type(layer).__name__}
    return {"type": "Linear", "weight": tuple(layer.weight.shape), "bias": layer.bias is not None}


def projection_weights(d_model: int, d_k: int, d_v: int, seed: int) -> dict[str, Tensor]:
    return {
        "w_q": seeded(d_k, d_model, seed=seed, scale=d_model**-0.5),
        "w_k": seeded(d_k, d_model, seed=seed + 1, scale=d_model**-0.5),
        "w_v": seeded(d_v, d_model, seed=seed + 2, scale=d_model**-0.5),
    }


def load_weights(module: nn.Module, weights: dict[str, Tensor]) -> nn.Module:
    with torch.no_grad():
        for name, w in weights.items():
            getattr(module, name).weight.copy_(w)
    return module


def probe_projections(student: Any) -> Observations:
    """What the attention modules of chapters 1-3 must hold: w_q, w_k (d_model -> d_k), w_v (d_model -> d_v)."""
    obs = {}
    for label, args, kwargs in (("default", (12, 5), {}), ("d_v_bias", (12, 5, 7), {"bias": True})):
        try:
            module = student(*args, **kwargs)
        except Exception as err:
            obs[label] = Raised(type(err).__name__, str(err))
            continue
        obs[label] = {name: linear_facts(getattr(module, name, None)) for name in ("w_q", "w_k", "w_v")}
        obs[label]["is_module"] = isinstance(module, nn.Module)
    return obs


def judge_projections(obs: Observations, class_name: str) -> None:
    for label, (d_model, d_k, d_v, bias) in (("default", (12, 5, 5, False)), ("d_v_bias", (12, 5, 7, True))):
        call = f"{class_name}({d_model}, {d_k}" + (")" if label == "default" else f", {d_v}, bias=True)")
        if isinstance(obs[label], Raised):
            raise Mistake(f"{call} {obs[label].describe()}")
        if not obs[label]["is_module"]:
            raise Mistake(f"{call} should be an nn.Module (subclass nn.Module and call super().__init__())")
        for name, out_features in (("w_q", d_k), ("w_k", d_k), ("w_v", d_v)):
            facts = obs[label][name]
            if facts["type"] != "Linear":
                raise Mistake(f"{call}.{name} should be an nn.Linear, got {facts['type']}")
            if facts["weight"] != (out_features, d_model):
                raise Mistake(
                    f"{call}.{name} maps {facts['weight'][1]} -> {facts['weight'][0]} features, expected "
                    f"{d_model} -> {out_features}" + (" (w_v maps d_model -> d_v; d_v falls back to d_k only "
                                                      "when it is not given)" if name == "w_v" else ""))
            if facts["bias"] != bias:
                raise Mistake(f"{call}.{name} should {'have' if bias else 'have no'} bias — pass bias=bias "
                              f"to nn.Linear")
