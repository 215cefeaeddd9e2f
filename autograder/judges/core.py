"""The trusted side of every hidden test: judges, which compare observations with the reference.

Each chapter module here registers a ``judge(observations)`` for every check
whose probe :mod:`autograder.checks` registers under the same id. A judge
rebuilds the probe's cases (importing them from the sandbox side), runs the
reference from :mod:`solutions` on them and raises :class:`Mistake` whose
message names the learner's likely mistake. Nothing here runs in the sandbox.

Observations come from an untrusted file, so :func:`judge_recorded` holds them
to the shape their cases produce: every key a judge reads must be there,
every key there must be read by a judge that passes, and judges pair cases
with observations through ``zip(..., strict=True)``. A record that does not
fit raises :class:`RecordMismatch`; the grader scores the cell 0 and flags the
submission. A judge that crashes on a record that fits fails the answer with
:class:`JudgeCrashed` instead: honest code can return anything.
"""

from __future__ import annotations

import functools
import re
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from attention_course.testing import (
    DEVICE_CHANGED,
    DTYPE_CHANGED,
    GRAPH_CUT,
    LIBRARY_CALL,
    MODIFIED_IN_PLACE,
    NO_RETURN,
    NO_VALUE_ERROR,
    KnownMistake,
    Mistakes,
    answer_value,
    mistake_name,
    named,
)
from autograder.checks.core import (
    PROJECTION_CASES,
    WIRE_DTYPES,
    Check,
    Mistake,
    Observations,
    Raised,
    load_all,
    seeded,
)

Judge = Callable[[Observations], None]

_JUDGES: dict[str, Judge] = {}


class RecordMismatch(Exception):
    """Observations that do not have the keys or the number of entries the check's cases produce."""


class JudgeCrashed(Mistake):
    """A judge raised something other than :class:`Mistake` on a record that fits its cases: the check could not
    compare what the answer returned. The answer fails (honest code can cause this); it is not flagged."""


#: what ``zip(..., strict=True)`` says when a record holds another number of cases than the check has
_SHORT_ZIP = re.compile(r"zip\(\) argument \d+ is (shorter|longer) than argument")


def register(check_id: str, judge: Judge) -> None:
    """Register the judge of the hidden check ``check_id`` (its probe is registered in autograder.checks)."""
    if check_id in _JUDGES:
        raise ValueError(f"the judge of check {check_id!r} is registered twice")
    _JUDGES[check_id] = judge


def load_judges() -> dict[str, str]:
    """Import every judge module (and so the reference); ``{module: "file:line: error"}`` for failures."""
    return load_all(__package__)


def get(check_id: str) -> Judge:
    load_judges()
    try:
        return _JUDGES[check_id]
    except KeyError:
        raise KeyError(f"no judge for the hidden check {check_id!r}") from None


def ids() -> list[str]:
    load_judges()
    return sorted(_JUDGES)


# ---------------------------------------------------------------- reading records

class _Record(dict):
    """Observations that remember which keys a judge has read."""

    def __init__(self, data: dict) -> None:
        super().__init__(data)
        self.read: set[str] = set()

    def __getitem__(self, key: str) -> Any:
        self.read.add(key)
        try:
            return super().__getitem__(key)
        except KeyError:
            raise RecordMismatch(f"the observation {key!r} is missing") from None

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        self.read.add(str(key))
        return super().__contains__(key)

    def _read_all(self) -> None:
        self.read.update(super().keys())

    def keys(self):  # noqa: ANN201
        self._read_all()
        return super().keys()

    def items(self):  # noqa: ANN201
        self._read_all()
        return super().items()

    def values(self):  # noqa: ANN201
        self._read_all()
        return super().values()

    def __iter__(self):  # noqa: ANN204
        self._read_all()
        return super().__iter__()


def decode(value: Any) -> Any:
    """The inverse of :func:`autograder.checks.core.encode`, for data read from an untrusted file."""
    if isinstance(value, list):
        return [decode(v) for v in value]
    if isinstance(value, dict):
        if "__tensor__" in value:
            dtype = WIRE_DTYPES.get(value["__tensor__"])
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
    """Judge observations recorded by a probe (trusted side).

    Raises :class:`Mistake` when the learner's answer is wrong, and
    :class:`RecordMismatch` when the record does not fit the check's cases: it cannot be decoded, it lacks a key
    the judge reads or holds one no judge reads, or it holds another number of cases than the check has. Any
    other exception of the judge is a :class:`JudgeCrashed` (a failing verdict), never a flag.
    """
    judge = get(check_id)
    try:
        observations = decode(encoded)
    except Exception as err:
        raise RecordMismatch(f"the observations cannot be read ({type(err).__name__}: {err})") from None
    record = _Record(observations) if isinstance(observations, dict) else observations
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            judge(record)
        except Mistake as failure:
            # Raise from here, without the judge's frames: the feedback shows the message, not hidden code.
            raise Mistake(failure.message, failure.name) from None
        except RecordMismatch:
            raise
        except ValueError as err:
            if _SHORT_ZIP.match(str(err)):  # a strict zip of the cases and the record's entries ran short
                raise RecordMismatch(f"{type(err).__name__}: {err}") from None
            raise _crashed(err, observations) from None
        except Exception as err:
            raise _crashed(err, observations) from None
    unread = set(dict.keys(record)) - record.read if isinstance(record, _Record) else set()
    if unread:
        raise RecordMismatch(f"unexpected observations {sorted(unread)}")


def unnamed(text: str) -> str:
    """``text``, ended so that it cannot read as naming a mistake: it may end with a repr of the learner's."""
    return f"{text}." if mistake_name(text) else text


def told(raised: Raised, what: str) -> str:
    """What a call that raised says, for a message: the probes' own ``WrongOutput`` and ``WeightsNotLoaded`` speak
    for themselves (``what: message``); anything else is quoted as it was raised."""
    if raised.type in ("WeightsNotLoaded", "WrongOutput"):
        return unnamed(f"{what}: {raised.message}")
    return f"{what} {raised.describe()}"


def judge_meta_crash(raised: Raised, call: str, off_device: KnownMistake, **fields: Any) -> None:
    """``call``, given inputs on the meta device, raised ``raised``. The meta device holds no data: an answer that
    reads its values (``int(...)``, boolean indexing, a loop that tests its tokens) cannot run there, so a crash of
    the meta device's own tells nothing and passes, while one that names devices (a tensor made on the CPU meeting
    one on meta, as it would meet one on a GPU) is ``off_device``, said with ``fields``. Any other crash is
    reported as raised."""
    message = raised.message.lower()
    if "device" in message:
        raise mistake(off_device, **fields)
    if "meta" not in message:
        raise Mistake(f"{call} {raised.describe()}")


def type_name(value: Any) -> str:
    """The type of an observed value, for a message (``tuple``, ``float``, ``NoneType``); for a value the probe kept
    only as its description (:func:`~autograder.checks.core.plain`: ``<dict>``, ``<meta tensor of shape (2, 3)>``),
    that description."""
    if isinstance(value, str) and value.startswith("<") and value.endswith(">"):
        return value[1:-1]
    return type(value).__name__


def _crashed(err: Exception, observations: Any) -> JudgeCrashed:
    return JudgeCrashed(f"the hidden check could not compare what your code returned with the expected result "
                        f"({type(err).__name__}: {str(err)[:200]}); it recorded {describe(observations)[:300]}")


def describe(value: Any) -> str:
    """A short description of observed data for a message: tensors by dtype and shape, the rest by repr."""
    if isinstance(value, Tensor):
        return f"a {str(value.dtype).removeprefix('torch.')} tensor of shape {tuple(value.shape)}"
    if isinstance(value, Raised):
        return value.describe()
    if isinstance(value, str) and value.startswith("<") and value.endswith(">"):
        return f"a {type_name(value)}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {describe(v)}" for k, v in dict.items(value)) + "}"
    if isinstance(value, (list, tuple)):
        inner = ", ".join(describe(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner}{',' if len(value) == 1 else ''})"
    return repr(value)


# ---------------------------------------------------------------- judging

@dataclass(frozen=True)
class Suspect:
    """A likely mistake: ``produce()`` computes what that mistake would return on the same inputs.

    ``message`` tells the learner what the mistake is and what to do; ``name`` is its short name, which the
    grader records and the class report counts. The learner reads both, as :attr:`text`: the message, then the
    name in parentheses. Every suspect has a name, one that :func:`~attention_course.testing.mistake_name`
    reads back from that text (a construction without one raises ValueError).
    """

    message: str
    name: str
    produce: Callable[[], Any]

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError(f"the suspect {self.message[:80]!r} has no name")
        if mistake_name(self.text) != self.name:
            raise ValueError(f"the suspect {self.message[:80]!r} is named {self.name!r}, which the end of its "
                             f"message would not read back as a name: use a few words that start with a letter "
                             f"and hold no parentheses")

    @property
    def text(self) -> str:
        """What the learner reads: the message, then `` (name)``."""
        return named(self.message, self.name)

    def part(self, index: int) -> Suspect:
        """The same mistake, producing item ``index`` of what this one produces (e.g. the weights of
        ``(out, weights)``)."""
        return Suspect(self.message, self.name, lambda: self.produce()[index])


def declared(mistakes: Mistakes, right: Callable[..., Any],
             case: Callable[..., tuple] | None = None) -> Callable[..., list[Suspect]]:
    """The suspects of a check from the mistakes declared in ``attention_course.mistakes``, which the visible
    checks use too: each mistake that applies to the case, recomputed with the reference ``right``.

    ``case(*check_case)`` turns a case of the check into the form the declarations take, when the two differ
    (a seed into the weights it draws, say).
    """
    def suspects(*check_case: Any) -> list[Suspect]:
        args = case(*check_case) if case is not None else check_case
        return [Suspect(m.text(*args), m.name, functools.partial(m.gives, right, *args))
                for m in mistakes if m.applies(*args)]

    # for tests/test_known_mistakes.py: which declarations a check names its mistakes from, and how
    suspects.mistakes, suspects.right, suspects.case = mistakes, right, case
    return suspects


def mistake(known: KnownMistake, what: str = "", **fields: Any) -> Mistake:
    """The :class:`Mistake` of a declared mistake that has no value to compare: ``what`` (the call), then the
    declaration's message filled in with ``fields``."""
    text = known.text(**fields)
    return Mistake(f"{what}: {text}" if what else text, known.name)


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


def judge_pads_ignored(what: str, losses: Any, pad_id: int, suspects: Callable[[], Iterable[Suspect]],
                       crashed: Callable[[Raised, str], Mistake], rule: str = "") -> None:
    """One case of a sequence loss's padding check: ``losses`` is (the loss, the loss with the logits at the pad
    positions changed, the loss with the logits at the real positions changed). The first two must agree (a pad
    position counts for nothing; ``rule`` says more, such as which terms), the last must differ; a loss that
    moves with the pads is named after the suspect it matches, else "pads not ignored"."""
    for out in losses:
        if isinstance(out, Raised):
            raise crashed(out, what)
        if not isinstance(out, Tensor) or out.numel() != 1:
            raise Mistake(f"{what} should return a single number as a 0-dim tensor, got {describe(out)}")
    before, after, moved = losses
    if not torch.allclose(before.to(torch.float64), after.to(torch.float64), atol=1e-5, rtol=1e-4):
        suspect = matching_suspect(before.reshape(()), suspects(), 1e-5, 1e-4)
        text = (f"{what}: changing the logits at the pad positions (where targets == {pad_id}) changed the loss from "
                f"{before.item():.6g} to {after.item():.6g} — a position whose target is pad_id must not count at "
                f"all{rule}")
        if suspect is None:
            raise Mistake(text, "pads not ignored")
        raise Mistake(f"{named(text, 'pads not ignored')}; it looks like this: {suspect.message}", suspect.name)
    if torch.allclose(before.to(torch.float64), moved.to(torch.float64), atol=1e-5, rtol=1e-4):
        raise Mistake(f"{what}: changing the logits at the real positions left the loss at {before.item():.6g} "
                      f"— the loss must be computed from the logits")


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


def judge_answers(obs: Observations, cases: Sequence[tuple], reference: Callable[..., Any],
                  suspects: Callable[..., list[Suspect]], what: Callable[..., str]) -> None:
    """Judge a concept check (probe: :func:`autograder.checks.core.probe_answers`) case by case.

    ``suspects(*args)`` lists the misconceptions, each a :class:`Suspect` whose ``produce()`` gives the answer
    that misconception gives for those arguments; ``what(*args)`` names the question asked, e.g.
    ``"score_count(4096)"``.
    """
    for args, got in zip(cases, obs["answers"], strict=True):
        asked = what(*args)
        if isinstance(got, Raised):
            raise Mistake(f"{asked} {got.describe()}")
        if got is None:
            raise Mistake(f"{asked} is None — did you forget to `return` the answer?", NO_RETURN)
        expected = answer_value(reference(*args))
        if got == expected:
            continue
        for suspect in suspects(*args):
            if got == answer_value(suspect.produce()):
                raise Mistake(f"{asked} is {got!r}: {suspect.message}", suspect.name)
        raise Mistake(f"{asked} is {got!r}, expected {expected!r}")


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
    mistake: str | None = None,
) -> None:
    """Raise :class:`Mistake` unless ``actual`` matches ``expected``; name the mistake when a suspect matches.

    ``mistake`` names the mistake that ``hint`` describes: the messages that end with the hint end with it.
    """
    suspects = list(suspects)
    tail = f" — {hint}" if hint else ""
    if isinstance(actual, Raised):
        raise Mistake(f"{what} {actual.describe()}")
    if not isinstance(actual, Tensor):
        if actual is None:
            raise Mistake(f"{what} should be a tensor of shape {tuple(expected.shape)}, got None — did you "
                          f"forget to `return` it?", NO_RETURN)
        raise Mistake(f"{what} should be a tensor of shape {tuple(expected.shape)}, got {actual!r:.80}")
    if _close(actual, expected, atol, rtol):
        return
    suspect = matching_suspect(actual, suspects, atol, rtol)
    if suspect is not None:
        raise Mistake(f"{what}: {suspect.message}", suspect.name)
    named_by_hint = mistake if hint else None
    if actual.shape != expected.shape:
        raise Mistake(f"{what} has shape {tuple(actual.shape)}, expected {tuple(expected.shape)}{tail}", named_by_hint)
    if torch.isnan(actual).any() and not torch.isnan(expected).any():
        first = first_index(torch.isnan(actual))
        raise Mistake(f"{what} contains NaN (first at index {first}) where a number was expected{tail}",
                      named_by_hint)
    a, e = actual.to(torch.float64), expected.to(torch.float64)
    diff = torch.where(same_values(a, e), torch.zeros_like(a), (a - e).abs().nan_to_num(float("inf")))
    where = first_index(diff == diff.max())
    raise Mistake(
        f"{what}: at index {where} got {actual[where].item():.6g}, expected {expected[where].item():.6g}{tail}",
        named_by_hint)


def no_suspects(*case: Any) -> list[Suspect]:
    return []


def identity(out: Any) -> Any:
    return out


@dataclass(frozen=True)
class Compare:
    """The judge of a declared :class:`~autograder.checks.core.Check`: each case's result against the reference.

    ``reference(*case)`` is the expected result, ``what(*case)`` the words that name the case in a message,
    ``suspects(*case)`` the likely mistakes (each producing what that mistake returns on the case), ``pick(out)``
    the tensor to compare (e.g. ``out[0]`` of ``(out, weights)``). A result that is a tuple compared item by
    item names its ``parts``, ``(index, label)`` in the order they are judged: item ``index`` is "the <label>
    of <what>", against the same item of the reference and of each suspect. ``guard(out, what, *case)`` runs
    first and raises :class:`Mistake` for a result of the wrong form (not a pair, the pair swapped...); a result
    that is not a tuple of as many parts fails after it. ``hint`` is a text or a function of the case;
    ``crashed(raised, what, *case)`` gives the :class:`Mistake` of a call that raised, when a chapter can tell
    what a crash most likely means (default: what it raised).
    ``compare(actual, expected, what, suspects, hint, atol, rtol)`` judges one result, or one part of it, once
    the guard has passed (default: :func:`judge_tensor`; masks, say, are compared exactly instead). ``also(obs)``
    judges what else the probe recorded beside the cases (a gradcheck, inputs of another dtype), after them.
    """

    check: Check
    reference: Callable[..., Any]
    what: Callable[..., str]
    suspects: Callable[..., list[Suspect]] = no_suspects
    hint: str | Callable[..., str] = ""
    atol: float = 1e-5
    rtol: float = 1e-4
    pick: Callable[[Any], Any] = identity
    parts: Sequence[tuple[int, str]] = ()
    guard: Callable[..., None] | None = None
    crashed: Callable[..., Mistake] | None = None
    compare: Callable[..., None] = judge_tensor
    also: Callable[[Observations], None] | None = None
    #: the result's dtype and device must be the reference's (the contract), unless an exercise says otherwise:
    #: a tensor on another device fails before its values are compared, one of another dtype after them
    same_type: bool = True

    def __call__(self, obs: Observations) -> None:
        judge_cases((out, lambda out, case=case: self.judge_one(out, *case))
                    for case, out in zip(self.check.cases, obs[self.check.key], strict=True))
        if self.also is not None:
            self.also(obs)

    def hint_for(self, *case: Any) -> str:
        return self.hint(*case) if callable(self.hint) else self.hint

    def judge_one(self, out: Any, *case: Any) -> None:
        what = self.what(*case)
        if isinstance(out, Raised):
            raise self.crashed(out, what, *case) if self.crashed else Mistake(f"{what} {out.describe()}")
        if self.guard is not None:
            self.guard(out, what, *case)
        expected, suspects, hint = self.reference(*case), self.suspects(*case), self.hint_for(*case)
        if not self.parts:
            if self.pick is not identity:
                suspects = [Suspect(s.message, s.name, lambda s=s: self.pick(s.produce())) for s in suspects]
            self.judge_device(self.pick(out), self.pick(expected), what)
            self.compare(self.pick(out), self.pick(expected), what, suspects, hint, self.atol, self.rtol)
            self.judge_dtype(self.pick(out), self.pick(expected), what)
        if self.parts and not (isinstance(out, tuple) and len(out) > max(index for index, _ in self.parts)):
            labels = ", ".join(label for _, label in sorted(self.parts))
            raise Mistake(f"{what} should return a tuple ({labels}); got {describe(out)}")
        for index, label in self.parts:
            self.judge_device(out[index], expected[index], f"the {label} of {what}")
            self.compare(out[index], expected[index], f"the {label} of {what}", [s.part(index) for s in suspects],
                         hint, self.atol, self.rtol)
            self.judge_dtype(out[index], expected[index], f"the {label} of {what}")

    def _typed(self, actual: Any, expected: Any) -> bool:
        return self.same_type and isinstance(actual, Tensor) and isinstance(expected, Tensor)

    def judge_device(self, actual: Any, expected: Any, what: str) -> None:
        """A tensor on another device than the reference's fails, before its values are compared (they cannot be
        across devices): the contract keeps the inputs' device."""
        if self._typed(actual, expected) and actual.device != expected.device:
            raise Mistake(f"{what} is on {actual.device}, expected {expected.device}: create new tensors on the "
                          f"inputs' device (`device=x.device`)", DEVICE_CHANGED)

    def judge_dtype(self, actual: Any, expected: Any, what: str) -> None:
        """A tensor whose values are right, of another dtype than the reference's, fails: the contract states it
        (int64 indices, float32 kept)."""
        if self._typed(actual, expected) and actual.dtype != expected.dtype:
            raise Mistake(f"{what} has dtype {actual.dtype}, expected {expected.dtype}: the values are right, the "
                          f"type is not (no `.float()`, `.double()`, `.int()` or hard-coded `dtype=`; keep the "
                          f"inputs' dtype, or the one the exercise states)", DTYPE_CHANGED)

def judge(compare: Compare) -> Compare:
    """Register ``compare`` as the judge of its check; returns it."""
    register(compare.check.id, compare)
    return compare


def judge_contract(
    obs: Observations,
    reference: Callable[..., Any],
    inputs: dict[str, Tensor],
    seed: int,
    function: str,
    forbidden: dict[str, str] | None = None,
) -> None:
    """Judge what :func:`~autograder.checks.core.observe_contract` recorded: no forbidden calls, dtype kept,
    inputs untouched, gradients."""
    called = obs["called"]
    for name, message in (forbidden or {}).items():
        if name in called:
            raise Mistake(f"{function} calls torch's `{name}` — {message}", LIBRARY_CALL)
    judge_contract_basics(obs, function)
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
    grads = obs["grads"]
    if set(grads) != set(floating):
        raise RecordMismatch(f"gradients recorded for {sorted(grads)}, expected {sorted(floating)}")
    for (name, _), want in zip(floating.items(), expected, strict=True):
        got = grads[name]
        if want is None:
            continue
        if got is None:
            raise Mistake(
                f"no gradient reaches `{name}` through {function} — something detaches it: `.detach()`, "
                f"`.data`, `.item()`, `.numpy()`, or building a new tensor from results", GRAPH_CUT)
        judge_tensor(got, want, f"the gradient of {function} with respect to `{name}`", atol=1e-8, rtol=1e-6,
                     hint="a NaN gradient on a fully masked row comes from a 0/0 or an exp(-inf - -inf) that "
                     "torch.where or nan_to_num hides in the forward pass but not in the backward pass; make the "
                     "values safe before the operation, not after")


def judge_contract_basics(
    obs: Observations, function: str,
    out_of_place: str = " (`q = q / s`, not `q /= s`; `masked_fill`, not `masked_fill_`)",
) -> None:
    """The verdicts every contract check starts with, on what :func:`~autograder.checks.core.observe_contract`
    recorded: no input modified in place (``out_of_place`` follows "use out-of-place operations" in that
    message), no crash, float64 kept, the output still in the graph."""
    if obs["modified"] or (obs["raised"] is not None and "in-place" in obs["raised"].message):
        names = ", ".join(f"`{n}`" for n in obs["modified"]) or "(a tensor that requires grad)"
        raise Mistake(f"{function} modified its input {names} in place — use out-of-place operations{out_of_place}",
                      MODIFIED_IN_PLACE)
    if obs["raised"] is not None:
        raise Mistake(f"{function} on float64 inputs {obs['raised'].describe()}")
    if obs["out_dtype"] is not None and obs["out_dtype"] != "torch.float64":
        raise Mistake(
            f"{function} returned {obs['out_dtype']} for float64 inputs — keep the input's dtype: no `.float()`, "
            f"no hard-coded `dtype=torch.float32`", DTYPE_CHANGED)
    if not obs["requires_grad"]:
        raise Mistake(
            f"{function}'s output is cut off from the graph (requires_grad is False) — avoid `.detach()`, "
            f"`.item()`, `.numpy()`, `torch.tensor(...)` of results and `torch.no_grad()`", GRAPH_CUT)


def contract_check(reference: Callable[..., Any], inputs: dict[str, Tensor], seed: int, function: str,
                   forbidden: dict[str, str] | None = None) -> Judge:
    """The judge of a check whose probe is ``observe_contract(call, inputs, seed)``."""
    return lambda obs: judge_contract(obs, reference, inputs, seed, function, forbidden)


# ---------------------------------------------------------------- shared by the chapters

def judge_value_error(raised: Any, what: str, must_mention: tuple[str, ...], mistake: str = "") -> None:
    """``raised`` is what a probe's :func:`attempt` returned for a call that must raise ValueError naming
    ``must_mention``; ``mistake`` is the short name of the mistake (default: no ValueError for bad arguments)."""
    if not isinstance(raised, Raised):
        raise Mistake(f"{what} should raise ValueError with a clear message, but nothing was raised",
                      mistake or NO_VALUE_ERROR)
    if raised.type != "ValueError":
        raise Mistake(f"{what} {raised.describe()}; check the arguments first and raise ValueError with a "
                      f"message that names the shapes or dtypes involved", mistake or NO_VALUE_ERROR)
    missing = [word for word in must_mention if word.lower() not in raised.message.lower()]
    if missing:
        raise Mistake(f"{what}: the ValueError should mention {missing}; its message was {raised.message!r}")


def value_errors(check: Check, expected: Sequence[tuple[str, tuple[str, ...]]]) -> Judge:
    """The judge of a declared check whose every case must raise ValueError: ``expected`` holds, case by case,
    the words that name the call in a message and the words the ValueError must mention (:func:`judge_value_error`,
    in the order of the cases)."""
    if len(expected) != len(check.cases):
        raise ValueError(f"value_errors of check {check.id!r}: {len(expected)} expectations for "
                         f"{len(check.cases)} cases")

    def judge_all(obs: Observations) -> None:
        for raised, (what, must_mention) in zip(obs[check.key], expected, strict=True):
            judge_value_error(raised, what, must_mention)

    return judge_all


def judge_projections(obs: Observations, class_name: str, bias_ignored: KnownMistake | None = None,
                      w_v_of_d_k: KnownMistake | None = None) -> None:
    """Judge what :func:`~autograder.checks.core.probe_projections` recorded. A chapter that declares the two
    mistakes of the projections' layers passes its declarations (``bias_ignored``, ``w_v_of_d_k``), which then
    name them; without, the words below do."""
    for label, args, kwargs in PROJECTION_CASES:
        d_model, d_k = args[:2]
        d_v, bias = (args[2] if len(args) > 2 else d_k), kwargs.get("bias", False)
        call = f"{class_name}({d_model}, {d_k}" + (")" if label == "default" else f", {d_v}, bias=True)")
        if isinstance(obs[label], Raised):
            raise Mistake(f"{call} {obs[label].describe()}")
        if not obs[label]["is_module"]:
            raise Mistake(f"{call} should be an nn.Module (subclass nn.Module and call super().__init__())")
        for name, out_features in (("w_q", d_k), ("w_k", d_k), ("w_v", d_v)):
            facts = obs[label][name]
            if facts["type"] != "Linear":
                raise Mistake(f"{call}.{name} should be an nn.Linear, got {facts['type']}")
            if tuple(facts["weight"]) != (out_features, d_model):
                width_d_k = name == "w_v" and d_v != d_k and tuple(facts["weight"]) == (d_k, d_model)
                if width_d_k and w_v_of_d_k is not None:
                    raise mistake(w_v_of_d_k, "", call=call, d_model=d_model, d_k=d_k, d_v=d_v)
                raise Mistake(
                    f"{call}.{name} maps {facts['weight'][1]} -> {facts['weight'][0]} features, expected "
                    f"{d_model} -> {out_features}" + (" — w_v maps d_model -> d_v; d_v falls back to d_k only "
                                                      "when it is not given" if name == "w_v" else ""),
                    "w_v of width d_k instead of d_v" if width_d_k else None)
            if facts["bias"] != bias:
                if bias_ignored is not None:
                    raise mistake(bias_ignored, "", call=call, name=name, have="have" if bias else "have no")
                raise Mistake(f"{call}.{name} should {'have' if bias else 'have no'} bias — pass bias=bias "
                              f"to nn.Linear", "bias argument ignored")
