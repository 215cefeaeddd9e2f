"""Find solution code or hidden-test text where learners can see it.

The secrets are every line of the solution and hidden-test regions of the
source notebooks, and every code line of the reference package and of the
hidden checks, probes and judges alike (docstrings, comments, imports, signatures and short lines
excepted: a signature is meant to be public, and a line like ``return out``
says nothing). A target file is searched after stripping HTML tags and
collapsing whitespace, so code split into highlighted spans is still found.
"""

from __future__ import annotations

import ast
import functools
import html
import importlib.util
import json
import re
from collections.abc import Iterable
from pathlib import Path

import nbformat

from autograder.release import COURSE_ROOT, REPO_ROOT

MIN_LENGTH = 25
MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS", "run_check(",
           "from solutions", "import solutions", "autograder.checks", "autograder.judges")
REGION = re.compile(r"### BEGIN (SOLUTION|HIDDEN TESTS)\n(.*?)### END \1", re.S)


def _normal(text: str) -> str:
    return " ".join(text.split())


#: a quoted name alone on its line, such as a test's grade id in a list: grade ids are published (the notebooks'
#: metadata, the feedback's table), and a name says nothing of how a check works
_NAME_ONLY = re.compile(r"""(["'])\w+\1[,:]?""")


def _keep(line: str) -> bool:
    line = line.strip()
    return (len(line) >= MIN_LENGTH and not line.startswith(("#", "def ", "class ", "@", "import ", "from "))
            and not line.startswith(('"""', "'''")) and not _NAME_ONLY.fullmatch(line))


def notebook_secrets(path: Path) -> tuple[set[str], set[str]]:
    """(lines inside the solution and hidden-test regions, the text outside them, which the release publishes)."""
    nb = nbformat.read(path, 4)
    secret, public = set(), set()
    for cell in nb.cells:
        for _, body in REGION.findall(cell.source):
            secret |= {_normal(line) for line in body.splitlines() if _keep(line)}
        public.add(_normal(REGION.sub("", cell.source)))  # whole cells: published text may wrap across lines
    return secret, public


def python_secrets(path: Path) -> set[str]:
    source = path.read_text()
    tree = ast.parse(source)
    hidden: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(getattr(body[0], "value", None), ast.Constant) and isinstance(body[0].value.value, str):
            hidden |= set(range(body[0].lineno, body[0].end_lineno + 1))  # docstrings
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            hidden |= set(range(node.lineno, node.body[0].lineno))  # signatures, however many lines
    return {_normal(line) for number, line in enumerate(source.splitlines(), 1)
            if number not in hidden and _keep(line)}


def all_secrets() -> set[str]:
    """Secret lines, less any text the source notebooks deliberately publish outside their secret regions.
    (Read again only when one of the files they come from has changed since the last call.)"""
    notebooks = sorted((COURSE_ROOT / "source").rglob("*.ipynb"))
    modules = sorted([*(REPO_ROOT / "solutions").rglob("*.py"), *(COURSE_ROOT / "checks").rglob("*.py"),
                      *(COURSE_ROOT / "judges").rglob("*.py")])
    stamp = tuple((str(p), st.st_mtime_ns, st.st_size) for p in [*notebooks, *modules] for st in [p.stat()])
    return set(_secrets_of(tuple(notebooks), tuple(modules), stamp))


@functools.lru_cache(maxsize=4)
def _secrets_of(notebooks: tuple[Path, ...], modules: tuple[Path, ...], stamp: tuple) -> frozenset[str]:
    secrets: set[str] = set()
    public: set[str] = set()
    for notebook in notebooks:
        hidden, shown = notebook_secrets(notebook)
        secrets |= hidden
        public |= shown
    for module in modules:
        secrets |= python_secrets(module)
    published = "\n".join(public)  # a secret that is part of a published line (a signature, say) is not secret
    return frozenset(line for line in secrets if line not in published)


def visible_text(path: Path) -> str:
    """What a reader can see in ``path``: HTML without tags, a notebook's sources and outputs, or raw text."""
    raw = path.read_text(errors="replace")
    if path.suffix == ".html":
        raw = html.unescape(re.sub(r"<[^>]+>", "", raw))
    elif path.suffix == ".ipynb":
        nb = json.loads(raw)
        parts = []
        for cell in nb.get("cells", []):
            parts.append("".join(cell.get("source", "")))
            for output in cell.get("outputs", []):
                parts.append(json.dumps(output))
        raw = "\n".join(parts)
    return _normal(raw)


TEXT_SUFFIXES = {".html", ".ipynb", ".js", ".txt", ".md", ".py", ".json", ".css", ".xml"}


@functools.cache
def _mathjax_package() -> Path | None:
    """Where sphinx-mathjax-offline keeps the MathJax it copies into every built book."""
    spec = importlib.util.find_spec("sphinx-mathjax-offline")
    return Path(spec.origin).parent / "static" / "mathjax" if spec and spec.origin else None


def _vendored(file: Path) -> bool:
    """A MathJax file byte-identical to the installed package's copy (24 MB of JavaScript that cannot hold
    course text, and would take most of the scan's time). A changed file is scanned like any other."""
    parts = file.parts
    if "_static" not in parts or "mathjax" not in parts or _mathjax_package() is None:
        return False
    reference = _mathjax_package().joinpath(*parts[parts.index("mathjax") + 1:])
    return reference.is_file() and reference.read_bytes() == file.read_bytes()


_WORD = re.compile(r"\w+")


def _inner_words(secret: str) -> frozenset[str]:
    """The words (maximal runs of word characters) of ``secret`` with a character of the secret on each side.
    Those characters are not word characters, so wherever the secret occurs in a text, each of these words occurs
    there whole, as one of the text's words: a text that lacks one cannot hold the secret."""
    return frozenset(m.group() for m in _WORD.finditer(secret) if m.start() > 0 and m.end() < len(secret))


def scan(paths: Iterable[Path], secrets: set[str] | None = None) -> list[str]:
    """Every (file, secret) that leaks, as readable lines; empty when nothing does.

    A secret is searched for only in a text that has all its inner words (:func:`_inner_words`): that finds
    exactly what searching for every secret in every text finds, in a fraction of the time."""
    secrets = all_secrets() if secrets is None else secrets
    ordered = [*MARKERS, *secrets]
    inner = [frozenset() if i < len(MARKERS) else _inner_words(s) for i, s in enumerate(ordered)]
    always, by_word = [], {}  # positions in ordered: searched in every text, or only in one with its longest word
    for position, words in enumerate(inner):
        always.append(position) if not words else by_word.setdefault(max(words, key=len), []).append(position)
    found = []
    for root in paths:
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for file in files:
            if file.suffix not in TEXT_SUFFIXES or _vendored(file):
                continue
            text = visible_text(file)
            words = set(_WORD.findall(text))
            candidates = always + [i for word in by_word.keys() & words for i in by_word[word] if inner[i] <= words]
            found += [f"{file}: {ordered[i]}" for i in sorted(candidates) if ordered[i] in text]
    return found
