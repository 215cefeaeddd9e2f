"""Small fixes to the rendered site, as a local Sphinx extension (listed in `_config.yml`).

- sphinx-thebe adds its inline configuration script once per reading phase, and a jupyter-book build can
  have two (once with the file name ``None``, once ``""``), so every page declared ``const THEBE_JS_URL``
  twice and the browser logged a SyntaxError. Each page keeps the first copy of any script it would load
  twice.
- Citations read "Vaswani et al. (2017)" and "(Vaswani et al., 2017)": sphinxcontrib-bibtex's author-year
  style with round brackets, registered here as ``author_year_round`` (its default brackets are square).
- The bibliography's entries are list items. Docutils writes them as ``role="doc-biblioentry"`` inside a
  ``role="list"``: a deprecated role, and a list whose children are not list items, which screen readers
  cannot count and the accessibility audit of the browser test (axe-core, WCAG 2 A) rejects.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from docutils import nodes
from sphinx.writers.html5 import HTML5Translator
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


def _visit_citation(self: HTML5Translator, node: nodes.citation) -> None:
    HTML5Translator.visit_citation(self, node)
    self.body[-1] = self.body[-1].replace('role="doc-biblioentry"', 'role="listitem"')


def _depart_citation(self: HTML5Translator, node: nodes.citation) -> None:
    HTML5Translator.depart_citation(self, node)


def setup(app) -> dict[str, Any]:
    register_plugin("sphinxcontrib.bibtex.style.referencing", "author_year_round", RoundAuthorYear, force=True)
    app.connect("html-page-context", _drop_repeated_scripts, priority=900)  # after the handlers that add scripts
    app.add_node(nodes.citation, override=True, html=(_visit_citation, _depart_citation))
    return {"parallel_read_safe": True, "parallel_write_safe": True}
