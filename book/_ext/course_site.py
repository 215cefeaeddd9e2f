"""Small fixes to the rendered site, as a local Sphinx extension (listed in `_config.yml`).

- sphinx-thebe adds its inline configuration script once per reading phase, and a jupyter-book build can
  have two (once with the file name ``None``, once ``""``), so every page declared ``const THEBE_JS_URL``
  twice and the browser logged a SyntaxError. Each page keeps the first copy of any script it would load
  twice.
- Citations read "Vaswani et al. (2017)" and "(Vaswani et al., 2017)": sphinxcontrib-bibtex's author-year
  style with round brackets, registered here as ``author_year_round`` (its default brackets are square).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sphinxcontrib.bibtex.plugin import register_plugin
from sphinxcontrib.bibtex.style.referencing import BracketStyle
from sphinxcontrib.bibtex.style.referencing.author_year import AuthorYearReferenceStyle


def _round() -> BracketStyle:
    return BracketStyle(left="(", right=")")


@dataclasses.dataclass
class RoundAuthorYear(AuthorYearReferenceStyle):
    """Author-year citations in round brackets."""

    bracket_parenthetical: BracketStyle = dataclasses.field(default_factory=_round)
    bracket_textual: BracketStyle = dataclasses.field(default_factory=_round)
    bracket_author: BracketStyle = dataclasses.field(default_factory=_round)
    bracket_label: BracketStyle = dataclasses.field(default_factory=_round)
    bracket_year: BracketStyle = dataclasses.field(default_factory=_round)


def _drop_repeated_scripts(app, pagename: str, templatename: str, context: dict[str, Any], doctree) -> None:
    scripts = context.get("script_files")
    if not scripts:
        return
    seen: set[tuple] = set()
    kept = []
    for script in scripts:
        attributes = getattr(script, "attributes", {}) or {}
        key = (str(getattr(script, "filename", script) or ""),  # inline scripts: None or ""
               tuple(sorted((k, str(v)) for k, v in attributes.items())))
        if key not in seen:
            seen.add(key)
            kept.append(script)
    context["script_files"] = kept


def setup(app) -> dict[str, Any]:
    register_plugin("sphinxcontrib.bibtex.style.referencing", "author_year_round", RoundAuthorYear, force=True)
    app.connect("html-page-context", _drop_repeated_scripts, priority=900)  # after the handlers that add scripts
    return {"parallel_read_safe": True, "parallel_write_safe": True}
