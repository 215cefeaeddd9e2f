"""The sandbox side of every hidden test: ``run_check(check_id, student_object)``.

A hidden check has two halves that live in two packages:

- its **probe**, here in :mod:`autograder.checks`: it runs the learner's code
  on cases built from fixed seeds and returns *observations*, plain data
  (tensors detached to the base class, numbers, strings, booleans), never the
  learner's own objects. This package is what the grading sandbox carries. It
  may import torch and this module, and nothing of the reference
  (``solutions``) or of the judges (``ruff`` bans both here: TID251);
- its **judge**, in :mod:`autograder.judges`: it rebuilds the same cases, runs
  the reference from :mod:`solutions` and raises :class:`Mistake` (an
  ``AssertionError``) whose message names the learner's likely mistake. It runs
  only in a trusted process.

Inside the sandbox (``$AUTOGRADER_OBSERVATIONS`` set) ``run_check`` only
records the observations, as one JSON line, for the trusted grader to judge.
Elsewhere (``nbgrader autograde``, a learner's own kernel with the course
installed) it encodes, decodes and judges them on the spot, through the same
code the grader uses, so that both paths give the same verdict.
"""

from __future__ import annotations

import copy
import importlib
import json
import math
import os
import pkgutil
import sys
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from attention_course.testing import answer_value, named

Observations = dict[str, Any]
Probe = Callable[[Any], Observations]

#: Set by the grader inside its sandbox: run_check appends its records to this file. The path is read once, when
#: the runner imports this module before the notebook's first cell, and taken out of the environment, so that
#: the learner's code can neither find it there nor send the records elsewhere by changing it.
OBSERVATIONS_ENV = "AUTOGRADER_OBSERVATIONS"
_RECORD_TO = os.environ.pop(OBSERVATIONS_ENV, None)


def observations_path() -> str | None:
    """Where the probes write their records (None: they judge in place, outside the sandbox)."""
    return _RECORD_TO


class Mistake(AssertionError):
    """A hidden check failed; the message says what is wrong and what to look at.

    ``name`` is the short name of the learner's likely mistake when the judge knows it (None otherwise): the
    grader records it as it is, from this field. ``str(mistake)`` is what the learner reads, the message with
    `` (name)`` at its end (:func:`attention_course.testing.named`), so that a reader of the text alone, such
    as nbgrader's cell output, still finds the name there.
    """

    def __init__(self, message: str, name: str | None = None) -> None:
        super().__init__(named(message, name))
        self.message = message
        self.name = name or None

    def __reduce__(self) -> tuple:
        return type(self), (self.message, self.name)


_PROBES: dict[str, Probe] = {}
_LOADED: set[str] = set()
_LOAD_FAILURES: dict[str, dict[str, str]] = {}  # package -> module -> why
#: check id -> the module that registers its probe, for the modules imported so far (see ``index``)
_OWNER: dict[str, str] = {}


def register(check_id: str, probe: Probe) -> None:
    """Register the probe of the hidden check ``check_id`` (the ``grade_id`` of its test cell)."""
    if check_id in _PROBES:
        raise ValueError(f"the probe of check {check_id!r} is registered twice")
    _PROBES[check_id] = probe
    _OWNER[check_id] = _registering_module()


def _registering_module() -> str:
    """The module whose code called :func:`register` (through :func:`declare` or not): the owner of the check,
    whoever imported that module first (a judge module imports its checks' module, perhaps before load_all)."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__") == __name__:
        frame = frame.f_back
    return frame.f_globals.get("__name__", "?") if frame is not None else "?"


def load_all(package: str = __package__) -> dict[str, str]:
    """Import every chapter module of ``package`` once (each registers its checks on import).

    Returns ``{module: "file:line: error"}`` for the modules that failed. A
    failed module is not retried (a retry would register its first checks
    twice) and does not stop the others; the grader refuses to start while any
    failure is listed (``python -m autograder selftest`` shows them).
    """
    root = importlib.import_module(package)
    failures = _LOAD_FAILURES.setdefault(package, {})
    for module in pkgutil.iter_modules(root.__path__):
        if module.name not in ("core", "__main__"):
            _load(f"{package}.{module.name}", failures)
    return dict(failures)


def _load(name: str, failures: dict[str, str]) -> None:
    if name in _LOADED:
        return
    _LOADED.add(name)
    try:
        importlib.import_module(name)
    except Exception as err:
        failures[name] = describe_failure(err)


INDEX_FILE = os.path.join(os.path.dirname(__file__), "index.json")


def index() -> dict[str, str]:
    """``{check_id: module}`` for every probe: the grader writes it into the sandbox bundle
    (``index.json`` beside this file), so that a kernel imports only the chapter it grades."""
    load_all()
    return dict(sorted(_OWNER.items()))


def _indexed(check_id: str) -> str | None:
    try:
        with open(INDEX_FILE, encoding="utf-8") as handle:
            return json.load(handle).get(check_id)
    except (OSError, ValueError):
        return None


def describe_failure(err: BaseException) -> str:
    """``path:line: Type: message`` of the innermost frame of the course's own code in ``err``'s traceback."""
    frames = [f for f in traceback.extract_tb(err.__traceback__) if "autograder" in f.filename
              or "solutions" in f.filename]
    where = f"{frames[-1].filename}:{frames[-1].lineno}: " if frames else ""
    return f"{where}{type(err).__name__}: {err}"


def get(check_id: str) -> Probe:
    module = None if check_id in _PROBES else _indexed(check_id)
    if module is not None:
        _load(module, _LOAD_FAILURES.setdefault(__package__, {}))
    if check_id not in _PROBES:
        load_all()
    try:
        return _PROBES[check_id]
    except KeyError:
        broken = "".join(f"; {name} failed to load: {why}" for name, why in load_all().items())
        raise KeyError(f"no hidden check called {check_id!r}{broken}") from None


def ids() -> list[str]:
    load_all()
    return sorted(_PROBES)


def run_check(check_id: str, student: Any) -> None:
    """Probe ``student``; record the observations (in the sandbox) or judge them here.

    Warnings raised by the learner's code are silenced: nbgrader counts any
    stderr output in a test cell as a failure, and a correct answer that
    triggers a library warning must keep its points. If anything stops the
    probe, a record says so before the exception goes on, so that a record
    written by the learner's code in the probe's place cannot stand alone.
    """
    probe = get(check_id)
    record_to = _RECORD_TO
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            observations = probe(student)
        except BaseException as stop:
            if record_to:
                _append(record_to, {"check": check_id, "interrupted": [
                    type(stop).__name__, str(stop)[:300], isinstance(stop, Exception)]})
            raise
        encoded = encode(observations)
    if record_to:
        _append(record_to, {"check": check_id, "observations": encoded})
        return
    # The one place the sandbox side names the judges: outside the sandbox (nbgrader's in-kernel path, a
    # learner's own kernel with the course installed). Inside it the record is written above and this line
    # never runs; the bundle has no judges to import.
    from autograder.judges.core import judge_recorded  # noqa: TID251

    judge_recorded(check_id, json.loads(json.dumps(encoded)))


def _append(path: str, record: dict) -> None:
    with open(path, "a", encoding="utf-8") as sink:
        sink.write(json.dumps(record) + "\n")


# ---------------------------------------------------------------- cases

def seeded(*shape: int, seed: int, dtype: torch.dtype = torch.float32, scale: float = 1.0) -> Tensor:
    """A standard-normal tensor of ``shape`` times ``scale``, reproducible from ``seed``."""
    return torch.randn(tuple(shape), generator=torch.Generator().manual_seed(seed), dtype=dtype) * scale


def seeded_mask(*shape: int, seed: int, p: float = 0.6) -> Tensor:
    """A boolean mask with ``True`` (may attend) with probability ``p``."""
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed)) < p


def projection_weights(d_model: int, d_k: int, d_v: int, seed: int) -> dict[str, Tensor]:
    return {
        "w_q": seeded(d_k, d_model, seed=seed, scale=d_model**-0.5),
        "w_k": seeded(d_k, d_model, seed=seed + 1, scale=d_model**-0.5),
        "w_v": seeded(d_v, d_model, seed=seed + 2, scale=d_model**-0.5),
    }


class WeightsNotLoaded(AttributeError):
    """The probe could not find where to copy a weight: the learner's module is organised differently."""


def load_weights(module: nn.Module, weights: dict[str, Tensor]) -> nn.Module:
    """Copy ``weights[name]`` into the weight of the ``nn.Linear`` ``module.<name>``, for every name."""
    with torch.no_grad():
        for name, w in weights.items():
            layer = getattr(module, name)
            if not isinstance(layer, nn.Linear):
                raise WeightsNotLoaded(f"`{type(module).__name__}.{name}` should be an nn.Linear, got "
                                       f"{type(layer).__name__}")
            layer.weight.copy_(w)
    return module


def feed_forward_weights(d: int, d_ff: int, seed: int) -> dict[str, Tensor]:
    """Seeded weights and biases of a feed-forward network ``d -> d_ff -> d``: ``w1``, ``b1``, ``w2``, ``b2``."""
    return {"w1": seeded(d_ff, d, seed=seed, scale=d**-0.5), "b1": seeded(d_ff, seed=seed + 1, scale=0.1),
            "w2": seeded(d, d_ff, seed=seed + 2, scale=d_ff**-0.5), "b2": seeded(d, seed=seed + 3, scale=0.1)}


def layer_norm_weights(d: int, seed: int) -> dict[str, Tensor]:
    """LayerNorm weights far from 1 and 0, so that a norm in the wrong place, or the wrong norm, shows."""
    return {"weight": 1.0 + seeded(d, seed=seed, scale=0.3), "bias": seeded(d, seed=seed + 1, scale=0.2)}


def load_layer_norm(module: Any, w: dict[str, Tensor], where: str) -> None:
    """Copy :func:`layer_norm_weights` into ``module``, which must be an ``nn.LayerNorm`` of their width."""
    if not isinstance(module, nn.LayerNorm) or module.weight is None or module.weight.shape != w["weight"].shape:
        raise WeightsNotLoaded(f"`{where}` should be an nn.LayerNorm({w['weight'].shape[0]}), got {module!r:.60}")
    with torch.no_grad():
        module.weight.copy_(w["weight"])
        module.bias.copy_(w["bias"])


# ---------------------------------------------------------------- observing

#: the dtypes a tensor may have on the wire (:func:`encode`); the judges decode these and no others
WIRE_DTYPES = {name: getattr(torch, name) for name in (
    "float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool")}


def odd_tensor(x: Tensor) -> str | None:
    """A description of a tensor whose numbers a probe cannot keep, e.g. ``"<meta tensor of shape (2, 3)>"``: on
    the meta device (it has none), sparse or nested, of a dtype outside :data:`WIRE_DTYPES` (complex, say). None
    for an ordinary tensor."""
    try:
        shape = tuple(x.shape)
        if x.is_nested or x.layout != torch.strided:
            kind = "nested" if x.is_nested else str(x.layout).removeprefix("torch.")
        elif x.device.type == "meta":
            kind = "meta"
        elif str(x.dtype).removeprefix("torch.") not in WIRE_DTYPES:
            kind = str(x.dtype).removeprefix("torch.")
        else:
            return None
    except Exception:  # a subclass whose shape or device cannot be read
        return f"<{type(x).__name__}>"
    return f"<{kind} tensor of shape {shape}>"


def plain(x: Any) -> Any:
    """What a probe may keep of a learner's value: plain tensors, numbers, strings, tuples of them.

    A tensor is detached, copied and stripped of any subclass; a tensor without numbers to keep (on the meta
    device, sparse, complex, ...) is kept as its description (:func:`odd_tensor`), and so is one that cannot be
    copied; anything else that is not a simple value is kept only as its type name.
    """
    if isinstance(x, Tensor):
        odd = odd_tensor(x)
        if odd is not None:
            return odd
        try:
            return x.detach().as_subclass(Tensor).clone()
        except Exception:  # a subclass that refuses to be copied
            return f"<{type(x).__name__}>"
    if isinstance(x, (bool, int, float, str)) or x is None:
        return x
    if isinstance(x, (tuple, list)):
        return tuple(plain(item) for item in x)
    return f"<{type(x).__name__}>"


class WrongOutput(TypeError):
    """The learner's function returned something that is not what the exercise asks for (shape, dtype)."""


def describe_value(x: Any) -> str:
    """A short description of what the learner's code returned, for a message: a tensor's dtype and shape, or the
    type of anything else."""
    if isinstance(x, Tensor):
        return f"a {str(x.dtype).removeprefix('torch.')} tensor of shape {tuple(x.shape)}" + (
            f" on {x.device.type}" if x.device.type != "cpu" else "")
    if isinstance(x, (tuple, list)):
        return f"a {type(x).__name__} of {len(x)}"
    return "None" if x is None else f"a {type(x).__name__}"


@dataclass(frozen=True)
class Raised:
    """A probe's record that the learner's code raised instead of returning."""

    type: str
    message: str

    def describe(self) -> str:
        if self.type == "NotImplementedError" and not self.message:
            return "raised NotImplementedError — replace `raise NotImplementedError()` with your code"
        # The learner's own words are quoted, so that a message of theirs ending in "(...)" is never read as the
        # name of a mistake.
        return f"raised {self.type}: {self.message!r}"


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


def attempt_as_is(call: Callable[[], Any]) -> Any:
    """Like :func:`attempt`, for probes that assemble their own plain observations (dicts included): ``call()`` as it
    returned, or a :class:`Raised` record."""
    try:
        return call()
    except Exception as err:  # the judge decides what a crash means
        return Raised(type(err).__name__, str(err))


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
            obs["grads"] = {name: plain(g) for name, g in zip(grads, found, strict=True)}
    except Exception as err:
        obs["raised"] = Raised(type(err).__name__, str(err))
    return obs


def linear_facts(layer: Any) -> dict[str, Any]:
    if not isinstance(layer, nn.Linear):
        return {"type": type(layer).__name__}
    return {"type": "Linear", "weight": tuple(layer.weight.shape), "bias": layer.bias is not None}


def probe_layers(cases: Sequence[tuple[str, tuple, dict]], names: Sequence[str]) -> Probe:
    """The probe of a module's layers: for each case ``(label, args, kwargs)``, whether ``student(*args,
    **kwargs)`` is an nn.Module and the :func:`linear_facts` of each of its attributes ``names``."""

    def probe(student: Any) -> Observations:
        obs = {}
        for label, args, kwargs in cases:
            try:
                module = student(*args, **kwargs)
                obs[label] = {name: linear_facts(getattr(module, name, None)) for name in names}
            except Exception as err:
                obs[label] = Raised(type(err).__name__, str(err))
                continue
            obs[label]["is_module"] = isinstance(module, nn.Module)
        return obs

    return probe


#: (label, args, kwargs) of the modules probe_projections builds: d_model 12, d_k 5, then d_v 7 with bias.
PROJECTION_CASES = (("default", (12, 5), {}), ("d_v_bias", (12, 5, 7), {"bias": True}))
#: What the attention modules of chapters 1-3 must hold: w_q, w_k (d_model -> d_k), w_v (d_model -> d_v).
probe_projections = probe_layers(PROJECTION_CASES, ("w_q", "w_k", "w_v"))


def _answer(x: Any) -> Any:
    """A concept check's answer as plain data (:func:`attention_course.testing.answer_value`); a tensor without
    numbers to read is kept as its description."""
    odd = odd_tensor(x) if isinstance(x, Tensor) else None
    return odd if odd is not None else answer_value(x)


def probe_answers(cases: Sequence[tuple]) -> Probe:
    """The probe of a concept check: the learner's answer for each case's arguments, as plain data
    (:func:`attention_course.testing.answer_value`); each call gets its own copy of the arguments."""

    def probe(student: Any) -> Observations:
        return {"answers": [attempt(lambda args=args: _answer(student(*copy.deepcopy(args)))) for args in cases]}

    return probe


# ---------------------------------------------------------------- declared checks

def fresh_copy(case: tuple) -> tuple:
    """``case`` with its tensors cloned, so that the learner's code cannot change the shared cases."""
    return tuple(x.clone() if isinstance(x, Tensor) else x for x in case)


def call_directly(student: Any, *case: Any) -> Any:
    """The learner's function on one case's arguments: ``student(*case)``."""
    return student(*case)


@dataclass(frozen=True)
class Check:
    """The probe of a check that runs the learner's object on fixed cases (its judge: ``judges.core.Compare``).

    ``cases`` are argument tuples built once, at import, from fixed seeds; ``call(student, *case)`` runs the
    learner's object on one case (default: ``student(*case)``); the observations are ``{key: [result of each
    case]}``, each result as :func:`attempt` keeps it, each call on its own copy of the case's tensors.
    """

    id: str
    cases: Sequence[tuple]
    call: Callable[..., Any] = call_directly
    key: str = "outs"

    def __post_init__(self) -> None:
        if not self.cases:
            raise ValueError(f"check {self.id!r} has no cases: write them (argument tuples built from fixed seeds) "
                             f"where it is declared, in autograder/checks/")

    def probe(self, student: Any) -> Observations:
        return {self.key: [attempt(lambda case=case: self.call(student, *fresh_copy(case))) for case in self.cases]}


def declare(check: Check) -> Check:
    """Register ``check``'s probe under its id; returns the check, for its judge to import."""
    register(check.id, check.probe)
    return check


# ---------------------------------------------------------------- plain data on the wire

def encode(value: Any) -> Any:
    """Observations as JSON-ready data: tensors become {dtype, shape, data}; nothing is pickled."""
    if isinstance(value, Tensor):
        t = plain(value)
        if isinstance(t, str):
            return t
        t = t.cpu()
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
