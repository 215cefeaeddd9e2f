"""The narratives' comparisons are checks that fail the build, not printed booleans.

Each chapter shows its claims ("ours matches PyTorch", "the mask leaves earlier outputs unchanged") with
``attention_course.checking``, which prints one line and raises when the claim is false. The unit tests prove the
helpers fail on a mismatch; the scan proves no narrative cell went back to ``print(torch.allclose(...))``.
"""

from __future__ import annotations

import ast
import json

import pytest
import torch

from attention_course.checking import check, check_close, check_differ, check_equal
from autograder.chapters import CHAPTERS as MANIFEST
from autograder.release import REPO_ROOT

CHAPTERS = sorted((REPO_ROOT / "book").glob("0*.ipynb"))
CHECKS = {"check", "check_close", "check_differ", "check_equal"}
COMPARISONS = {"allclose", "isclose", "equal"}  # torch.allclose, tensor.isclose, torch.equal, ...
BOOLEAN_CALLS = COMPARISONS | {"all", "any", "is_contiguous", "isnan", "isinf", "isfinite"}


# ---- the helpers ---------------------------------------------------------------------------------------------


def test_check_close_prints_one_line_when_the_tensors_match(capsys) -> None:
    a = torch.tensor([1.0, 2.0, 3.0])
    check_close("ours vs PyTorch", a + 1e-7, a, atol=1e-6)
    line = capsys.readouterr().out
    assert line.startswith("ours vs PyTorch: matches (largest difference 1.") and line.count("\n") == 1, line


def test_check_close_raises_naming_the_label_and_the_difference() -> None:
    a = torch.zeros(2, 3)
    b = a.clone()
    b[1, 2] = 0.5
    with pytest.raises(AssertionError, match=r"ours vs PyTorch: does not match; largest difference 0\.5.*"
                                             r"index \(1, 2\): 0 against 0\.5"):
        check_close("ours vs PyTorch", a, b)


def test_check_close_uses_allclose_tolerances() -> None:
    a = torch.tensor([100.0])
    check_close("inside rtol", a + 5e-4, a, atol=0.0, rtol=1e-5)  # 5e-4 <= 1e-5 * 100
    with pytest.raises(AssertionError, match="inside atol only"):
        check_close("inside atol only", a + 2e-3, a, atol=1e-3, rtol=0.0)
    with pytest.raises(AssertionError, match="nan"):
        check_close("a NaN never matches", torch.tensor([float("nan")]), torch.tensor([0.0]))


def test_check_differ_passes_on_a_difference_and_raises_on_agreement(capsys) -> None:
    check_differ("changed output", torch.tensor([0.0, 1.0]), torch.tensor([0.0, 0.0]))
    assert capsys.readouterr().out == "changed output: differs (largest difference 1)\n"
    with pytest.raises(AssertionError, match="unchanged output: expected a difference"):
        check_differ("unchanged output", torch.ones(3), torch.ones(3) + 1e-9)
    with pytest.raises(AssertionError, match="within tolerance"):
        check_differ("within tolerance", torch.ones(3), torch.ones(3) + 1e-5, atol=1e-4)
    check_differ("any difference with zero tolerance", torch.ones(3), torch.ones(3) + 1e-5, atol=0, rtol=0)


def test_check_equal_is_exact(capsys) -> None:
    mask = torch.tensor([[True, False], [True, True]])
    check_equal("mask round trip", mask.clone(), mask)
    assert capsys.readouterr().out == "mask round trip: identical\n"
    with pytest.raises(AssertionError, match=r"tables: not identical; 1 of 3 entries differ, the first at index \(2,"):
        check_equal("tables", torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, 2.0, 3.0 + 1e-6]))


def test_check_states_a_fact_and_raises_when_it_is_not_the_expected_one(capsys) -> None:
    check("rows sum to 1", torch.tensor(True))
    check("contiguous after the transpose", False, expected=False)
    assert capsys.readouterr().out == "rows sum to 1: True\ncontiguous after the transpose: False\n"
    with pytest.raises(AssertionError, match="NaN in the gradient: got True, but the text relies on False"):
        check("NaN in the gradient", torch.tensor([True]), expected=False)
    with pytest.raises(AssertionError, match="same shape: got False"):
        check("same shape", (2, 3) == (3, 2))
    assert capsys.readouterr().out == "", "a failed check must not print its line as if it held"


@pytest.mark.parametrize(("call", "error", "words"), [
    (lambda: check_close("shapes", torch.ones(3), torch.ones(1)), ValueError, "the shapes differ, (3,) against (1,)"),
    (lambda: check_close("dtypes", torch.ones(2), torch.ones(2, dtype=torch.float64)), TypeError, "dtypes differ"),
    (lambda: check_differ("not a tensor", torch.ones(2), [1.0, 1.0]), TypeError, "second value must be a tensor"),
    (lambda: check_equal("", torch.ones(2), torch.ones(2)), TypeError, "needs a label"),
    (lambda: check("many", torch.tensor([True, False])), TypeError, "reduce it with .all() or .any()"),
    (lambda: check("a number", 1), TypeError, "got int"),
    (lambda: check("expected", True, expected="yes"), TypeError, "expected must be True or False"),
])
def test_bad_input_gets_a_clear_error(call, error, words) -> None:
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        call()


def test_tensors_that_need_grad_are_compared_without_grad(capsys) -> None:
    a = torch.ones(2, requires_grad=True)
    check_close("leaf vs copy", a * 1.0, a.detach())
    assert "matches" in capsys.readouterr().out


# ---- the narratives ------------------------------------------------------------------------------------------


def _code_cells(path) -> list[tuple[str, str]]:
    cells = json.loads(path.read_text())["cells"]
    return [(cell.get("id", str(i)), "".join(cell["source"])) for i, cell in enumerate(cells)
            if cell["cell_type"] == "code"]


def _unwrap(node: ast.expr) -> ast.expr:
    """``bool(x)`` and ``x.item()`` print the same truth as ``x``."""
    while isinstance(node, ast.Call):
        if isinstance(node.func, ast.Name) and node.func.id == "bool" and len(node.args) == 1:
            node = node.args[0]
        elif isinstance(node.func, ast.Attribute) and node.func.attr == "item" and not node.args:
            node = node.func.value
        else:
            break
    return node


def _call_name(node: ast.Call) -> str | None:
    if isinstance(node.func, ast.Attribute):
        return node.func.attr
    return node.func.id if isinstance(node.func, ast.Name) else None


def _is_boolean(node: ast.expr) -> bool:
    node = _unwrap(node)
    if isinstance(node, ast.Compare) or (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)):
        return True
    if isinstance(node, ast.BoolOp):  # `a == b and c == d`, but not `mistakes or "none"`
        return all(_is_boolean(value) for value in node.values)
    return isinstance(node, ast.Call) and _call_name(node) in BOOLEAN_CALLS


def _printed_values(call: ast.Call) -> list[ast.expr]:
    values = []
    for arg in call.args:
        if isinstance(arg, ast.JoinedStr):
            values += [part.value for part in arg.values if isinstance(part, ast.FormattedValue)]
        else:
            values.append(arg)
    return values


def unchecked_comparisons(source: str) -> list[str]:
    """What in one code cell shows or asserts a comparison outside ``attention_course.checking``."""
    tree = ast.parse(source)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}

    def inside_a_check(node: ast.AST) -> bool:
        while node in parents:
            node = parents[node]
            if isinstance(node, ast.Call) and _call_name(node) in CHECKS:
                return True
        return False

    found = []
    for node in ast.walk(tree):
        where = f"line {getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Assert):
            found.append(f"{where}: a bare assert; use attention_course.checking.check")
        elif isinstance(node, ast.Call) and _call_name(node) == "print":
            found += [f"{where}: prints the comparison {ast.unparse(value)!r}; use a check"
                      for value in _printed_values(node) if _is_boolean(value)]
        elif isinstance(node, ast.Call) and _call_name(node) in COMPARISONS and not inside_a_check(node):
            found.append(f"{where}: {ast.unparse(node)!r} is computed outside a check; pass the tensors to one")
    return found


@pytest.mark.parametrize("source", [
    'print("allclose:", torch.allclose(out, out_torch, atol=1e-6))',
    'print(f"same vector: {torch.allclose(a, b)}")',
    'print("identical:", torch.equal(a, b))',
    'print("changed:", not torch.allclose(a, b))',
    'print("pad rows are zero:", bool((out[2:] == 0).all()))',
    'print("NaN in the gradient:", v.grad.isnan().any().item())',
    'print("same shapes:", a.shape == b.shape and c.shape == d.shape)',
    'print("contiguous:", x.is_contiguous())',
    'print(torch.isclose(a, b).all())',
    'same = torch.allclose(a, b)\nprint("same:", same)',
    'assert counted == by_formula, (counted, by_formula)',
])
def test_the_scan_finds_a_printed_comparison(source) -> None:
    assert unchecked_comparisons(source), f"the scan missed: {source}"


@pytest.mark.parametrize("source", [
    'check_close("out vs PyTorch", out, out_torch, atol=1e-6)',
    'check("same numbers", torch.equal(a, b), expected=False)',
    'print("row sums:", weights.sum(dim=-1))',
    'print("mistakes:", result.mistakes or "none")',
    'print("accuracy:", (guess.argmax(dim=-1) == target).float().mean().item())',
    'print(f"{source:<34} greedy {out}{\'  right\' if out == target else \'\'}")',
    'print("rows with nothing to see:", (~mask.any(dim=-1)).sum().item())',
    'print("length 3:", exact[lengths == 3].float().mean().item())',
])
def test_the_scan_leaves_plain_data_alone(source) -> None:
    assert unchecked_comparisons(source) == []


def test_every_chapter_of_the_manifest_has_its_narrative_and_no_other() -> None:
    assert CHAPTERS == [c.narrative for c in MANIFEST], CHAPTERS


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_no_narrative_prints_a_bare_comparison(path) -> None:
    found = [f"{path.name}, cell {cell_id}, {problem}"
             for cell_id, source in _code_cells(path) for problem in unchecked_comparisons(source)]
    assert not found, "comparisons the build cannot fail on:\n" + "\n".join(found)


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_every_narrative_checks_its_claims(path) -> None:
    calls = [node for _, source in _code_cells(path) for node in ast.walk(ast.parse(source))
             if isinstance(node, ast.Call) and _call_name(node) in CHECKS]
    assert calls, f"{path.name} checks nothing with attention_course.checking"
