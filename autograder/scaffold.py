"""``python -m autograder new-exercise ASSIGNMENT NAME --points P``: the cells, stubs and entries of a new exercise.

Everything that only lists the exercise is written here, so that a contributor writes the exercise itself and
nothing else (CONTRIBUTING.md, "Adding an exercise"):

- the source notebook ``autograder/source/<assignment>/<module>.ipynb``: after the last contract exercise, a
  locked section heading ``## N. Title (P points)``, the solution cell (signature, docstring, solution markers),
  a *Try it* pair, and per test a line ``**Test `NAME_prop`** — ... (p points)`` and its locked test cell, whose
  hidden region runs ``run_check`` and whose visible part raises until the visible check is written; the later
  sections renumbered, and the notebook's list of pieces given the new one;
- ``autograder/chapters.py``: the name appended to the chapter's contract;
- ``solutions/<module>.py``: a reference stub after the last contract exercise, added to ``__all__``;
- ``autograder/checks/<module>.py`` and ``autograder/judges/<module>.py``: a ``Check`` with no cases yet (which
  refuses to load until it has some) and its ``Compare`` (or ``value_errors`` for a test named ``errors``); in a
  chapter that declares its mistakes (``attention_course/mistakes/<module>.py``), an empty group of them there,
  which the judge names its suspects from, and the list of the words the errors test wants: the judge is then
  complete;
- ``tests/catalogue/<module>.py``: a comment with the form of a wrong and a correct entry (the catalogue test
  fails until both exist);
- ``book/notation.md``'s table of exercises, ``README.md``'s points and ``book/intro.md``'s list of what each
  chapter implements;
- the student notebook, regenerated.

Nothing is written unless every check passes first (:class:`ScaffoldError` says what is wrong).
"""

from __future__ import annotations

import ast
import itertools
import json
import keyword
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

from autograder.chapters import REPO_ROOT, Chapter, chapter

WIDTH = 120  # ruff's line length
CELL_ID_MAX = 64  # nbformat's longest cell id


def _comment(text: str, indent: str = "", mark: str = "#") -> str:
    """``text`` as comment lines (``mark``: ``#``, or ``#:`` for Sphinx) of at most WIDTH characters, at
    ``indent``."""
    return "\n".join(textwrap.wrap(text, WIDTH, initial_indent=f"{indent}{mark} ",
                                   subsequent_indent=f"{indent}{mark}     " if mark == "#" else f"{indent}{mark} ",
                                   break_on_hyphens=False, break_long_words=False))


def _fstring(text: str, column: int) -> str:
    """The f-string literal ``f"text"`` starting at ``column`` (after ``    return ``, say), split into adjacent
    literals within parentheses, aligned, when one line would pass WIDTH. Splits only at ", " outside braces."""
    if column + len(text) + 3 <= WIDTH:
        return f'f"{text}"'
    pieces, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += (ch == "{") - (ch == "}")
        if depth == 0 and text.startswith(", ", i):
            pieces.append(text[start:i + 2])
            start = i + 2
    pieces.append(text[start:])
    lines, line = [], ""
    for piece in pieces:
        if line and column + 1 + len(line) + len(piece) + 4 > WIDTH:  # (f"...") and a comma's room
            lines.append(line)
            line = ""
        line += piece
    lines.append(line)
    return "(" + f"\n{' ' * (column + 1)}".join(f'f"{line}"' for line in lines) + ")"

def _split_top(text: str) -> list[str]:
    """``text`` split at the commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += (ch in "([{") - (ch in ")]}")
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _def_line(name: str, signature: str, indent: str = "") -> str:
    """``def name(signature):`` at ``indent``, its arguments one a row when one line would pass WIDTH."""
    line = f"{indent}def {name}{signature}:"
    if len(line) <= WIDTH:
        return line
    depths = itertools.accumulate((ch == "(") - (ch == ")") for ch in signature)
    end = next(i for i, depth in enumerate(depths) if depth == 0)  # the parenthesis that closes the arguments
    arguments = "".join(f"{indent}    {a},\n" for a in _split_top(signature[1:end]))
    return f"{indent}def {name}(\n{arguments}{indent}){signature[end + 1:]}:"


def _raise(message: str, indent: str) -> str:
    """``raise NotImplementedError("message")`` at ``indent``, the message split into adjacent literals when one
    line would pass WIDTH."""
    line = f'{indent}raise NotImplementedError("{message}")'
    if len(line) <= WIDTH:
        return line
    head = f"{indent}raise NotImplementedError("
    pieces, piece = [], ""
    for word in message.split(" "):
        grown = f"{piece} {word}" if piece else word
        if piece and len(head) + len(grown) + 4 > WIDTH:
            pieces.append(piece + " ")
            piece = word
        else:
            piece = grown
    pieces.append(piece)
    return head + f"\n{' ' * len(head)}".join(f'"{p}"' for p in pieces) + ")"


#: What the line above a test cell says it checks, for the test names the scaffold knows.
CHECKS = {
    "values": "the values on fixed cases",
    "errors": "a ValueError naming the shapes, for bad arguments",
    "contract": "the dtype kept, the input untouched, gradients",
}


#: The words the scaffold writes where the contributor has something to write; none may stay in a notebook or a
#: reference (tests/test_scaffold.py).
PLACEHOLDERS = (
    "(the equation, in words)", "(what it is, and its shape)", "(what it returns, and its shape)",
    "computes, its equation, and the shapes it takes and returns", "(What the cell below runs.)", "(its output)",
    "(what it checks)", "on a small example, printed", "write the visible check of", "as a learner would write it",
    ": write it in solutions/",
)


class ScaffoldError(ValueError):
    """A request the scaffold refuses; the message says why and what to do."""


@dataclass(frozen=True)
class Request:
    assignment: str
    name: str
    points: int
    title: str
    tests: tuple[tuple[str, int], ...]  # (property, points)
    signature: str  # "(x: Tensor) -> Tensor"
    takes: str
    returns: str


def parse_tests(spec: str | None, points: int) -> tuple[tuple[str, int], ...]:
    """``values,errors`` (points split evenly, the first ones taking the rest) or ``values:3,errors:1``."""
    if points < 1:
        raise ScaffoldError(f"--points must be at least 1, got {points}")
    if spec is None:
        spec = "values" if points == 1 else "values,errors"
    items = [s.strip() for s in spec.split(",") if s.strip()]
    if not items:
        raise ScaffoldError("--tests names no test: give e.g. values,errors")
    props, given = [], []
    for item in items:
        prop, _, pts = item.partition(":")
        if not re.fullmatch(r"[a-z][a-z0-9_]*", prop):
            raise ScaffoldError(f"--tests: {prop!r} is not a test name (lowercase letters, digits, _)")
        props.append(prop)
        if pts:
            if not pts.isdigit() or int(pts) < 1:
                raise ScaffoldError(f"--tests: {item!r}: a test's points are a whole number of at least 1")
            given.append(int(pts))
    if len(set(props)) != len(props):
        raise ScaffoldError(f"--tests names a test twice: {spec}")
    if given and len(given) != len(props):
        raise ScaffoldError(f"--tests: give the points of every test or of none: {spec}")
    if given:
        if sum(given) != points:
            raise ScaffoldError(f"--tests: the tests' points add up to {sum(given)}, not --points {points}")
        return tuple(zip(props, given, strict=True))
    if len(props) > points:
        raise ScaffoldError(f"--tests: {len(props)} tests cannot share {points} point(s): each needs at least 1")
    share, extra = divmod(points, len(props))
    return tuple((p, share + (i < extra)) for i, p in enumerate(props))


def _arguments(signature: str) -> list[tuple[str, str]]:
    """(name, annotation text) of each argument of ``signature``."""
    fn = ast.parse(f"def f{signature}: pass").body[0]
    args = [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]
    return [(a.arg, ast.unparse(a.annotation) if a.annotation else "") for a in args]


def make_request(assignment: str, name: str, points: int, title: str | None = None, tests: str | None = None,
                 signature: str = "(x: Tensor) -> Tensor", takes: str | None = None,
                 returns: str | None = None) -> Request:
    """The checked request: every refusal comes from here, before anything is written."""
    try:
        c = chapter(assignment)
    except ValueError as err:
        raise ScaffoldError(str(err)) from None
    if not name.isidentifier() or keyword.iskeyword(name) or name.startswith("_"):
        raise ScaffoldError(f"{name!r} is not a name an exercise can have: a Python identifier, not a keyword, "
                            "not starting with _")
    if not name[0].islower():
        raise ScaffoldError(f"{name!r}: the scaffold writes function exercises, named in lowercase; scaffold a "
                            "function and turn its cells into a class by hand")
    if name in c.exercises() or name in c.contract:
        raise ScaffoldError(f"{name!r} is already an exercise of {assignment}")
    parsed = parse_tests(tests, points)
    longest = max(len(f"{name}-{prop}-heading") for prop, _ in parsed)
    if longest > CELL_ID_MAX - 3:  # room for a "-2" that keeps an id unique
        fits = CELL_ID_MAX - 3 - longest + len(name)
        raise ScaffoldError(f"{name!r} is too long: its cells' ids ({name.replace('_', '-')}-...-heading) would pass "
                            f"nbformat's {CELL_ID_MAX} characters; a name of at most {fits} characters fits")
    taken = {meta.get("grade_id") for meta in _metas(c)}
    clash = sorted(taken & {name, f"{name}_intro", *(f"{name}_{p}" for p, _ in parsed)})
    if clash:
        raise ScaffoldError(f"{assignment}'s notebook already has cells with grade_id {', '.join(clash)}")
    defined = {n.name for n in ast.parse(_solutions(c).read_text(encoding="utf-8")).body
               if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    if name in defined:
        raise ScaffoldError(f"solutions/{c.module}.py already defines {name}")
    try:
        arguments = _arguments(signature)
    except SyntaxError:
        raise ScaffoldError(f"--signature {signature!r} is not a Python signature, e.g. '(x: Tensor, p: float) -> "
                            "Tensor'") from None
    result = ast.parse(f"def f{signature}: pass").body[0].returns
    return Request(
        assignment, name, points, title or f"`{name}`", parsed, signature,
        takes or ", ".join(f"`{a}`" for a, _ in arguments) or "nothing",
        returns or (f"`{ast.unparse(result)}`" if result is not None else "see the exercise"))


def _metas(c: Chapter) -> list[dict]:
    return [cell.get("metadata", {}).get("nbgrader", {}) for cell in c._cells()]


def _solutions(c: Chapter) -> Path:
    return REPO_ROOT / "solutions" / f"{c.module}.py"


def _checks(c: Chapter) -> Path:
    return REPO_ROOT / "autograder" / "checks" / f"{c.module}.py"


def _judges(c: Chapter) -> Path:
    return REPO_ROOT / "autograder" / "judges" / f"{c.module}.py"


def _mistakes(c: Chapter) -> Path:
    """The chapter's declared mistakes; a chapter with this file names every mistake from it
    (``tests/test_known_mistakes.py``)."""
    return REPO_ROOT / "attention_course" / "mistakes" / f"{c.module}.py"


def _catalogue(c: Chapter) -> Path:
    return REPO_ROOT / "tests" / "catalogue" / f"{c.module}.py"


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def _meta(grade_id: str, *, grade: bool = False, solution: bool = False, points: int | None = None) -> dict:
    meta = {"grade": grade, "grade_id": grade_id, "locked": not solution, "schema_version": 3, "solution": solution,
            "task": False}
    if points is not None:
        meta["points"] = points
    return {"nbgrader": dict(sorted(meta.items()))}


def _docstring(r: Request, indent: str) -> str:
    args = "".join(f"{indent}    {a}: (what it is, and its shape)\n" for a, _ in _arguments(r.signature))
    return (f'{indent}"""{r.title.strip("`")}: (the equation, in words).\n\n'
            + (f"{indent}Args:\n{args}\n" if args else "")
            + f'{indent}Returns:\n{indent}    (what it returns, and its shape)\n{indent}"""\n')


# ---------------------------------------------------------------- the notebook

def notebook_cells(r: Request, number: int, ids: set[str], declared: bool = False) -> list[dict]:
    """The cells of the new section, numbered ``number``, with ids not in ``ids``; in a chapter that declares
    its mistakes (``declared``), the visible checks' stub points to the declarations."""
    stem = r.name.replace("_", "-")

    def cell_id(suffix: str) -> str:
        base = f"{stem}{suffix}"
        found, n = base, 2
        while found in ids:
            found, n = f"{base}-{n}", n + 1
        ids.add(found)
        return found

    def markdown(suffix: str, source: str, meta: dict | None = None) -> dict:
        return {"cell_type": "markdown", "id": cell_id(suffix), "metadata": meta or {}, "source": _lines(source)}

    def code(suffix: str, source: str, meta: dict | None = None) -> dict:
        return {"cell_type": "code", "execution_count": None, "id": cell_id(suffix), "metadata": meta or {},
                "outputs": [], "source": _lines(source)}

    call = ", ".join(a for a, _ in _arguments(r.signature))
    cells = [
        markdown("-intro", f"## {number}. {r.title} ({r.points} point{'s' * (r.points != 1)})\n\n"
                 f"(What `{r.name}` computes, its equation, and the shapes it takes and returns; raise `ValueError` "
                 "naming the shapes for bad arguments.)", _meta(f"{r.name}_intro")),
        code("", f"{_def_line(r.name, r.signature)}\n{_docstring(r, '    ')}    ### BEGIN SOLUTION\n"
             + _raise(f"the notebook's answer of {r.name}, as a learner would write it", "    ") + "\n"
             "    ### END SOLUTION", _meta(r.name, solution=True)),
        markdown("-try", "**Try it.** (What the cell below runs.) Expected output:\n\n```text\n(its output)\n```"),
        code("-try-code", f"# {r.name}({call}) on a small example, printed"),
    ]
    for prop, pts in r.tests:
        gid = f"{r.name}_{prop}"
        what = CHECKS.get(prop, "(what it checks)")
        cells.append(markdown(f"-{prop.replace('_', '-')}-heading",
                              f"**Test `{gid}`** — {what} ({pts} point{'s' * (pts != 1)})"))
        cells.append(code(f"-{prop.replace('_', '-')}",
                          f"### BEGIN HIDDEN TESTS\nfrom autograder.checks import run_check\n\n"
                          f"run_check(\"{gid}\", {r.name})\n### END HIDDEN TESTS\n"
                          + _comment("attention_course.testing: " + (
                              f"assert_close(out, by_hand(*case), what, suspects=known.{r.name.upper()}.suspects("
                              "by_hand, *case)), expect_value_error(...)" if declared else
                              "assert_close(..., suspects={...: ...}), expect_value_error(...)")) + "\n"
                          + _raise(f"write the visible check of {gid}", ""),
                          _meta(gid, grade=True, points=pts)))
    return cells


def _renumber(source: str) -> str:
    """A heading ``## N.`` becomes ``## N+1.``, ``### Na.`` becomes ``### (N+1)a.``."""
    source = re.sub(r"^## (\d+)\.", lambda m: f"## {int(m[1]) + 1}.", source, flags=re.M)
    return re.sub(r"^### (\d+)([a-z])\.", lambda m: f"### {int(m[1]) + 1}{m[2]}.", source, flags=re.M)


def _intro_list(source: str, r: Request, number: int) -> str:
    """The intro's numbered list of pieces, when it has one: the new piece as item ``number``, later ones
    renumbered."""
    lines = source.split("\n")
    items = [i for i, line in enumerate(lines) if re.match(r"\d+\. ", line)]
    at = next((i for i in items if line_number(lines[i]) == number), None)
    if at is None:
        return source
    for i in items:
        if line_number(lines[i]) >= number:
            lines[i] = re.sub(r"^\d+", str(line_number(lines[i]) + 1), lines[i])
    new = f"{number}. `{r.name}` — {r.title.strip('`') if r.title != f'`{r.name}`' else 'see its section'} " \
          f"({r.points} point{'s' * (r.points != 1)})"
    lines.insert(at, new)
    return "\n".join(lines)


def line_number(line: str) -> int:
    return int(re.match(r"(\d+)\.", line)[1])


def new_notebook(c: Chapter, r: Request) -> dict:
    nb = json.loads(c.source.read_text(encoding="utf-8"))
    cells = nb["cells"]
    last = c.contract[-1]
    start = next(i for i, cell in enumerate(cells) if cell["metadata"].get("nbgrader", {}).get("grade_id") == last
                 and cell["metadata"]["nbgrader"].get("solution"))
    at = next((i for i in range(start + 1, len(cells)) if cells[i]["cell_type"] == "markdown"
               and "".join(cells[i]["source"]).startswith("## ")), len(cells))
    found = re.match(r"## (\d+)\.", "".join(cells[at]["source"])) if at < len(cells) else None
    number = int(found[1]) if found else len(c.contract) + 1
    for cell in cells[at:]:
        if cell["cell_type"] == "markdown":
            cell["source"] = _lines(_renumber("".join(cell["source"])))
    if cells and cells[0]["cell_type"] == "markdown":
        cells[0]["source"] = _lines(_intro_list("".join(cells[0]["source"]), r, number))
    ids = {cell.get("id") for cell in cells}
    cells[at:at] = notebook_cells(r, number, ids, _mistakes(c).exists())
    return nb


# ---------------------------------------------------------------- chapters.py

def new_chapters(text: str, c: Chapter, name: str) -> str:
    """``autograder/chapters.py`` with ``name`` at the end of ``c``'s contract (the tuple rewritten, wrapped)."""
    tree = ast.parse(text)
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "Chapter"
                and len(n.args) > 4 and isinstance(n.args[2], ast.Constant) and n.args[2].value == c.assignment)
    contract = node.args[4]
    names = [*(e.value for e in contract.elts), name]
    lines = text.split("\n")
    indent = " " * (contract.col_offset + 1)
    first_prefix = lines[contract.lineno - 1][:contract.col_offset]
    rest = lines[contract.end_lineno - 1][contract.end_col_offset:]
    wrapped = textwrap.wrap(", ".join(f'"{n}"' for n in names), WIDTH - len(indent) - len(rest) - 1,
                            break_on_hyphens=False)
    body = [first_prefix + "(" + wrapped[0]] + [indent + w for w in wrapped[1:]]
    body[-1] += ")" + rest
    return "\n".join(lines[:contract.lineno - 1] + body + lines[contract.end_lineno:])


# ---------------------------------------------------------------- solutions/<module>.py

def new_solutions(text: str, c: Chapter, r: Request) -> str:
    """``solutions/<module>.py`` with the reference stub of ``r`` after the chapter's last contract exercise, and
    its name after that exercise's in ``__all__`` (on the same row if it fits, else the list one name a row)."""
    last = c.contract[-1]
    text = _listed_after(text, last, r.name)
    tree = ast.parse(text)
    lines = text.split("\n")
    defined = next(n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == last)
    stub = (f"\n\n{_def_line(r.name, r.signature)}\n" + _docstring(r, "    ").replace('"""', 'r"""', 1)
            + _raise(f"the reference of {r.name}: write it in solutions/{c.module}.py", "    "))
    lines[defined.end_lineno:defined.end_lineno] = stub.split("\n")
    return "\n".join(lines)


def _listed_after(text: str, last: str, name: str) -> str:
    """``text`` with ``name`` after ``last`` in its ``__all__``."""
    tree = ast.parse(text)
    lines = text.split("\n")
    listed = next(n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "__all__")
    names = [e.value for e in listed.value.elts]
    names.insert(names.index(last) + 1, name)
    element = next(e for e in listed.value.elts if e.value == last)
    row = lines[element.lineno - 1]
    rest = row[element.end_col_offset:]
    if "," in rest.split("]")[0]:  # a comma follows it on this row: the new name goes after the comma
        at = element.end_col_offset + rest.index(",") + 1
        candidate = row[:at] + f' "{name}",' + row[at:]
    else:  # the last name of the list, closed on this row (a one-line __all__, say): the new one after it
        candidate = row[:element.end_col_offset] + f', "{name}"' + row[element.end_col_offset:]
    if len(candidate) <= WIDTH:
        lines[element.lineno - 1] = candidate
        return "\n".join(lines)
    # too long for its row: the whole list, one name a row, as ruff formats a long list
    start, end = listed.value.lineno - 1, listed.value.end_lineno - 1
    prefix, suffix = lines[start][:listed.value.col_offset], lines[end][listed.value.end_col_offset:]
    block = [prefix + "["] + [f'    "{n}",' for n in names] + ["]" + suffix]
    return "\n".join(lines[:start] + block + lines[end + 1:])


# ---------------------------------------------------------------- checks, judges, catalogue

def _constant(r: Request, prop: str) -> str:
    return f"{r.name}_{prop}".upper()


def _kind(name: str) -> int:
    """ruff's isort order inside ``from x import (...)``: constants, classes, then the rest."""
    bare = name.lstrip("_")
    if bare.upper() == bare:
        return 0
    return 1 if bare[:1].isupper() else 2


def _add_imports(text: str, module: str, names: list[str]) -> str:
    """``text`` with ``names`` added to its ``from <module> import (...)``, in ruff's order."""
    tree = ast.parse(text)
    node = next(n for n in tree.body if isinstance(n, ast.ImportFrom) and n.module == module)
    imported = sorted({a.name for a in node.names} | set(names), key=lambda n: (_kind(n), n.lower()))
    lines = text.split("\n")
    block = [f"from {module} import ("] + [f"    {n}," for n in imported] + [")"]
    return "\n".join(lines[:node.lineno - 1] + block + lines[node.end_lineno:])


def checks_section(r: Request) -> str:
    call = ", ".join(a for a, _ in _arguments(r.signature))
    parts = [f"\n\n# ================================================================ {r.name}\n"]
    for prop, _ in r.tests:
        gid = f"{r.name}_{prop}"
        doing = ("every case must raise ValueError" if prop == "errors"
                 else "each case an argument tuple built from fixed seeds")
        parts.append(f"\n{_constant(r, prop)} = declare(Check(\"{gid}\", [\n"
                     + _comment(f"({call}{',' * (len(_arguments(r.signature)) == 1)}): {doing}", "    ")
                     + "\n]))")
    return "".join(parts) + "\n"


def judges_section(r: Request, declared: bool = False) -> str:
    """The judges of the new checks. In a chapter that declares its mistakes (``declared``) they name them from
    ``attention_course.mistakes.<module>``, and nothing is left to write here."""
    arguments = _arguments(r.signature)
    params = ", ".join(f"{a}: {t}" if t else a for a, t in arguments)
    shown = ", ".join(f"{a} of shape {{tuple({a}.shape)}}" if t == "Tensor" else f"{a}={{{a}!r}}"
                      for a, t in arguments)
    fn = f"_{r.name}"
    parts = [f"\n\n# ================================================================ {r.name}\n\n"
             f"def {fn}_what({params}) -> str:\n    return {_fstring(f'{r.name}({shown})', len('    return '))}\n\n\n"]
    if declared:
        parts.append(f"{fn}_suspects = declared(known.{r.name.upper()}, ref.{r.name})\n\n")
    else:
        parts.append(f"def {fn}_suspects({params}) -> list[Suspect]:\n"
                     f"    return [  # each likely mistake, recomputed on the same inputs: Suspect(message, name, "
                     f"produce)\n    ]\n\n")
    for prop, _ in r.tests:
        if prop == "errors" and declared:
            parts.append(f"\nregister(\"{r.name}_errors\", value_errors({_constant(r, prop)}, "
                         f"known.{_constant(r, 'refused')}))")
        elif prop == "errors":
            parts.append(f"\nregister(\"{r.name}_errors\", value_errors({_constant(r, prop)}, [\n"
                         f"    # per case: (what the call is, (words its ValueError must mention, ...)),\n]))")
        else:
            parts.append(f"\njudge(Compare({_constant(r, prop)}, ref.{r.name}, {fn}_what, {fn}_suspects))")
    return "".join(parts) + "\n"


def mistakes_section(r: Request) -> str:
    """A declared chapter's new group of mistakes, empty, and the words its bad calls' ValueErrors must say."""
    call = ", ".join(a for a, _ in _arguments(r.signature))
    parts = [f"\n\n# ================================================================ {r.name}\n"
             + _comment(f"Cases: ({call}{',' * (len(_arguments(r.signature)) == 1)}). right({call}) is the right "
                        "answer.") + "\n\n"
             f"{r.name.upper()} = Mistakes([\n"
             + _comment(f"KnownMistake(name, message, lambda right, {call}: what the mistake gives, from torch and "
                        "right)", "    ") + "\n"
             "])\n"]
    if any(p == "errors" for p, _ in r.tests):
        parts.append("\n" + _comment(f"Per case of {r.name}_errors, in order: (what the call is, (words its "
                                      "ValueError must mention, ...)).", mark="#:")
                     + f"\n{_constant(r, 'refused')} = [\n]\n")
    return "".join(parts)


def _ensure_imported(text: str, module: str, names: list[str]) -> str:
    tree = ast.parse(text)
    node = next((n for n in tree.body if isinstance(n, ast.ImportFrom) and n.module == module), None)
    if node is None:
        raise ScaffoldError(f"no `from {module} import (...)` to add {', '.join(names)} to")
    missing = [n for n in names if n not in {a.name for a in node.names}]
    return _add_imports(text, module, missing) if missing else text


def _formatted(code: str) -> str:
    """``code`` as it is when every line fits WIDTH; else as ``ruff format`` writes it (a long name's lines
    wrapped), keeping the two blank lines before it (``code`` as it is where ruff is not beside this Python)."""
    ruff = Path(sys.executable).parent / "ruff"
    if all(len(line) <= WIDTH for line in code.split("\n")) or not ruff.exists():
        return code
    done = subprocess.run([str(ruff), "format", "--line-length", str(WIDTH), "--stdin-filename", "section.py", "-"],
                          input=code, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        return code
    return "\n\n" + done.stdout if code.startswith("\n\n") else done.stdout


def new_checks(text: str, c: Chapter, r: Request) -> str:
    text = _ensure_imported(text, "autograder.checks.core", ["Check", "declare"])
    return text.rstrip("\n") + "\n" + _formatted(checks_section(r))


def new_judges(text: str, c: Chapter, r: Request) -> str:
    declared = _mistakes(c).exists()
    text = _add_imports(text, f"autograder.checks.{c.module}", [_constant(r, p) for p, _ in r.tests])
    needed = ["declared"] if declared else ["Suspect"]
    needed += ["Compare", "judge"] if any(p != "errors" for p, _ in r.tests) else []
    needed += ["register", "value_errors"] if any(p == "errors" for p, _ in r.tests) else []
    text = _ensure_imported(text, "autograder.judges.core", needed)
    if "Tensor" in r.signature and not re.search(r"^from torch import .*\bTensor\b", text, re.M):
        raise ScaffoldError(f"autograder/judges/{c.module}.py does not import Tensor, which the signature uses")
    if declared and f"from attention_course.mistakes import {c.module} as known" not in text:
        raise ScaffoldError(f"autograder/judges/{c.module}.py does not import its chapter's declared mistakes, "
                            f"`from attention_course.mistakes import {c.module} as known`")
    return text.rstrip("\n") + "\n" + _formatted(judges_section(r, declared))


def new_mistakes(text: str, c: Chapter, r: Request) -> str:
    text = _ensure_imported(text, "attention_course.testing", ["KnownMistake", "Mistakes"])
    return text.rstrip("\n") + "\n" + _formatted(mistakes_section(r))


def new_catalogue(text: str, c: Chapter, r: Request) -> str:
    call = ", ".join(a for a, _ in _arguments(r.signature))
    cell = f"{r.name}_{r.tests[0][0]}"
    head = _comment(f"Write, as a learner would, at least one wrong answer of {r.name} and one correct "
                    "alternative, and add them to WRONG and CORRECT (tests/test_catalogue.py fails until both exist):")
    return (text.rstrip("\n") + f"\n\n# ================================================================ {r.name}\n"
            + head + "\n#\n" + _def_line(f"{r.name}_<mistake>", f"({call})", "#     ") + textwrap.dedent(f"""
        #         ...  # the mistake
        #
        #     Entry("{r.name}", "<what the learner did>",
        #           {r.name}_<mistake>, "<the Suspect's name>",
        #           "{cell}"),  # in WRONG
        #     Entry("{r.name}", "<how it is written>",
        #           {r.name}_<alternative>),  # in CORRECT
        """))


# ---------------------------------------------------------------- the tables

def new_notation(text: str, c: Chapter, r: Request) -> str:
    lines = text.split("\n")
    last = c.contract[-1]
    at = max(i for i, line in enumerate(lines) if re.match(rf"\|\s*\[?{c.number}\b", line)
             and re.search(rf"\|\s*`{re.escape(last)}\b", line))
    args = ", ".join(a for a, _ in _arguments(r.signature))
    lines.insert(at + 1, f"| {c.number} | `{r.name}({args})` | {r.takes} | {r.returns} |")
    return "\n".join(lines)


def new_readme(text: str, c: Chapter, total: float) -> str:
    pattern = rf"^(\| {c.number} \| .*\| `{re.escape(c.assignment)}` \| [^|]*\| )[\d.]+( \|)$"
    new, count = re.subn(pattern, lambda m: f"{m[1]}{total:g}{m[2]}", text, flags=re.M)
    if count != 1:
        raise ScaffoldError(f"README.md: no row of Chapter {c.number} in the table of points")
    return new


def new_intro(text: str, c: Chapter, name: str) -> str:
    last = c.contract[-1]
    pattern = rf"^(\| {c.number} \| \[[^|]*\]\({re.escape(c.assignment)}\.ipynb\) \| [^|]*`{re.escape(last)}`)"
    new, count = re.subn(pattern, lambda m: f"{m[1]}, `{name}`", text, flags=re.M)
    if count != 1:
        raise ScaffoldError(f"book/intro.md: no row of Chapter {c.number} ending with `{last}`")
    return new


# ---------------------------------------------------------------- all together

def new_exercise(r: Request, regenerate: bool = True) -> list[Path]:
    """Write the exercise's cells, stubs and entries (every file computed before any is written); return the
    files written."""
    c = chapter(r.assignment)
    nb = new_notebook(c, r)
    points = sum(float(cell["metadata"]["nbgrader"]["points"]) for cell in nb["cells"]
                 if cell["metadata"].get("nbgrader", {}).get("grade"))
    chapters_py, notation = REPO_ROOT / "autograder" / "chapters.py", REPO_ROOT / "book" / "notation.md"
    readme, intro = REPO_ROOT / "README.md", REPO_ROOT / "book" / "intro.md"
    read = {p: p.read_text(encoding="utf-8") for p in (
        chapters_py, _solutions(c), _checks(c), _judges(c), _catalogue(c), notation, readme, intro)}
    written = {
        c.source: json.dumps(nb, indent=1, ensure_ascii=False) + "\n",
        chapters_py: new_chapters(read[chapters_py], c, r.name),
        _solutions(c): new_solutions(read[_solutions(c)], c, r),
        _checks(c): new_checks(read[_checks(c)], c, r),
        _judges(c): new_judges(read[_judges(c)], c, r),
        _catalogue(c): new_catalogue(read[_catalogue(c)], c, r),
        notation: new_notation(read[notation], c, r),
        readme: new_readme(read[readme], c, points),
        intro: new_intro(read[intro], c, r.name),
    }
    if _mistakes(c).exists():
        written[_mistakes(c)] = new_mistakes(_mistakes(c).read_text(encoding="utf-8"), c, r)
    for path, text in written.items():
        if path.suffix == ".py":
            compile(text, str(path), "exec")  # a scaffold that writes broken code stops before writing anything
    for path, text in written.items():
        path.write_text(text, encoding="utf-8")
    paths = list(written)
    if regenerate:
        from autograder.release import generate_release

        paths.append(generate_release(r.assignment) / c.source.name)
    return paths
