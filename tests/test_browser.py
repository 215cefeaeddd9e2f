"""The built book in a real browser: Debian's Chromium, headless, driven through its chromedriver.

The book is built once for the session (``built_html``), served on localhost, and every page of
``_toc.yml`` is visited: it must load without a console error, its maths must be typeset by MathJax (no raw
``$$`` or ``\\(`` left on the page), every image must load and every internal link must resolve. A search for
"mask" must find the masking chapter. Every page is audited for accessibility with axe-core 4 (its axe.min.js ships
inside the axe-core-python wheel, so nothing is downloaded) against the WCAG 2.0 and 2.1 A and AA rules in the light
colour mode, and against those of them that judge colours in the dark mode (the colour rules on one element of each
look, ``SAMPLE``), switched to as a reader does, with the theme's switch, and every figure of the content must
have a text alternative that says something (not a file name or a hash). Screenshots of a few pages are kept as test
artifacts under ``$TEST_ARTIFACTS`` (default ``_build/test-artifacts``).

Chromium and chromedriver come from Debian (``apt-get install chromium chromium-driver``; ``.ci/run`` does it).
Without them the tests fail and say so: a browser test that skipped itself would prove nothing.
"""

from __future__ import annotations

import html
import os
import re
import shutil
import urllib.error
import urllib.request
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urldefrag, urljoin, urlparse

import pytest
import yaml
from book_site import serve, toc_files

from autograder.release import REPO_ROOT

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")
ARTIFACTS = Path(os.environ.get("TEST_ARTIFACTS", REPO_ROOT / "_build" / "test-artifacts"))
SCREENSHOTS = {"home": "book/intro.html", "chapter-1": "book/01_self_attention.html",
               "exercises-2": "notebooks/02_causal_masking/masking.html", "notation": "book/notation.html"}

# Waits for the page, then for MathJax (when the page loads it) to finish typesetting, then calls `report`.
SETTLE = """
const done = arguments[arguments.length - 1];
const settle = (report) => {
  const go = () => (window.MathJax && window.MathJax.startup && window.MathJax.startup.promise)
    ? window.MathJax.startup.promise.then(report, e => done({error: String(e)})) : report();
  if (document.readyState === 'complete') go(); else window.addEventListener('load', go);
};
"""

# Returns what the checks need once the page has settled. Text inside code blocks is left out of the raw-maths
# check: a `$` in code is code, not maths.
INSPECT = SETTLE + """
settle(() => {
  const body = document.body.cloneNode(true);
  body.querySelectorAll('pre, code, script, style, mjx-container, .MathJax').forEach(n => n.remove());
  const images = [...document.images].map(i => ({src: i.currentSrc || i.src, ok: i.complete && i.naturalWidth > 0}));
  const maths = [...document.querySelectorAll('.math')];
  done({
    text: body.innerText,
    mathjax: typeof window.MathJax !== 'undefined' && !!window.MathJax.startup,
    maths: maths.length,
    typeset: maths.filter(m => m.querySelector('mjx-container')).length,
    images: images,
    links: [...document.querySelectorAll('a[href]')].map(a => a.href),
  });
});
"""

# The rules of the audit: WCAG 2.0 and 2.1, levels A and AA (axe-core's tags; axe refuses a tag it does not know,
# which is why axe-selenium-python, whose axe-core 3.1 predates WCAG 2.1, is not used).
AXE_TAGS = ("wcag2a", "wcag2aa", "wcag21a", "wcag21aa")
MODES = ("light", "dark")
# The light mode is audited against all of them. The dark mode changes the theme's colours and nothing else of the
# page, so it is audited against the rules of those tags whose verdict depends on colour: text contrast (AA), and
# links told from the text around them by colour alone (A). The other rules would only repeat the light pass.
COLOUR_RULES = ("color-contrast", "link-in-text-block")

# The colour rules judge each element that holds text, and most of a chapter's text is in thousands of elements that
# look alike (a code cell's tokens, the rows of a table): on Chapter 6's page they took 14 of the light audit's 19 s.
# They are run on one element of each look: the first element holding text for each combination of its tag, its
# colour, font size, weight, text shadow and opacity, and the background colour, background image and opacity of it
# and of every element it lies in (8,526 text elements, 199 looks, on that page). Two elements of one look have the
# same contrast unless something outside that list lies behind one of them, on one page or on two: a look audited on
# one page is not audited again on the next in the same mode (AUDIT's third argument, the looks seen so far). The
# other rules see the whole page.
SAMPLE = """
const looks = new Map(), behind = new Map(), before = new Set(Array.isArray(arguments[2]) ? arguments[2] : []);
const background = (el) => {
  if (!el) return '';
  if (!behind.has(el)) {
    const s = getComputedStyle(el);
    behind.set(el, [s.backgroundColor, s.backgroundImage, s.opacity].join(' ') + ' > ' + background(el.parentElement));
  }
  return behind.get(el);
};
document.querySelectorAll('[data-audit-sample]').forEach(el => el.removeAttribute('data-audit-sample'));
const texts = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
for (let text = texts.nextNode(); text; text = texts.nextNode()) {
  const el = text.parentElement;
  if (!el || !text.nodeValue.trim()) continue;
  const s = getComputedStyle(el);
  const look = [el.tagName, s.color, s.fontSize, s.fontWeight, s.textShadow, s.opacity, background(el)].join(' | ');
  if (!looks.has(look) && !before.has(look)) { looks.set(look, el); el.setAttribute('data-audit-sample', ''); }
}
"""

# Once the page has settled: its colour mode, axe's violations (compacted: what a reader of the failure needs),
# and the text alternative of every figure of the content. A figure is an <img>, or an <svg> that says it is an
# image; the maths (MathJax's own output) is not a figure. Its text alternative is what a screen reader reads:
# aria-labelledby, aria-label, then alt (an <img>) or <title> (an <svg>). The first argument is axe's options for the
# rules other than the colour rules (null: none of them), which see the whole page; the colour rules then see one
# element of each look (SAMPLE).
AUDIT = SETTLE + """
const others = arguments[0], colour = arguments[1];
const named = (el) => {
  const ids = (el.getAttribute('aria-labelledby') || '').split(/\\s+/).filter(Boolean);
  const labelled = ids.map(id => document.getElementById(id)).filter(Boolean).map(n => n.textContent).join(' ');
  const title = el.tagName.toLowerCase() === 'svg' ? el.querySelector(':scope > title') : null;
  return labelled || el.getAttribute('aria-label') || el.getAttribute('alt') || (title ? title.textContent : '') || '';
};
const compact = (results) => results.violations.map(v => ({
  id: v.id, impact: v.impact, help: v.help,
  nodes: v.nodes.map(n => ({target: n.target.join(' '), summary: n.failureSummary || ''})),
}));
settle(() => {
  const figures = [...document.querySelectorAll('.bd-article img, .bd-article svg[role="img"]')]
    .filter(el => !el.closest('mjx-container, .MathJax'))
    .map(el => ({tag: el.tagName.toLowerCase(), src: el.currentSrc || el.getAttribute('src') || '', alt: named(el)}));
""" + SAMPLE + """
  const whole = others ? axe.run(document, others) : Promise.resolve({violations: []});
  const only = {runOnly: {type: 'rule', values: colour}};
  const none = Promise.resolve({violations: []});
  const sample = () => looks.size ? axe.run({include: [['[data-audit-sample]']]}, only) : none;
  whole.then(first => sample().then(sampled => done({
      theme: document.documentElement.dataset.theme,
      figures: figures,
      looks: [...looks.keys()],
      violations: [...compact(first), ...compact(sampled)],
    })))
    .catch(e => done({error: String(e)}));
});
"""

# A text alternative that names a file or a hash (Sphinx's default alt is the image's path, and myst-nb names
# output images by their SHA-256), or only says that there is a picture, does not say what the figure shows.
FILE_NAME = re.compile(r"\S*\.(png|jpe?g|gif|svg|webp|pdf)|\S*/\S*", re.IGNORECASE)  # the whole text
HASH = re.compile(r"\b[0-9a-f]{12,}\b", re.IGNORECASE)
GENERIC = {"image", "figure", "picture", "plot", "chart", "graph", "diagram", "img", "output"}


def _driver():
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if shutil.which(path) is None]
    if missing:
        pytest.fail(f"the browser test needs Debian's Chromium and its driver, missing: {', '.join(missing)}. "
                    "Install them with `apt-get install chromium chromium-driver` (.ci/run does).")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-dev-shm-usage", "--window-size=1280,900"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_script_timeout(60)
    driver.set_page_load_timeout(60)
    return driver


@pytest.fixture(scope="module")
def site(built_html):
    with serve(built_html) as base:
        yield base


@pytest.fixture(scope="module")
def browser():
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must not try to download a browser or driver
    driver = _driver()
    yield driver
    driver.quit()


def _served(url: str) -> tuple[int, str | None]:
    """The HTTP status of ``url`` and the text of its <title>, as the server sends them."""
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            status, body = response.status, response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as err:
        return err.code, None
    found = re.search(r"<title>(.*?)</title>", body, re.S)
    return status, " ".join(html.unescape(found.group(1)).split()) if found else None


# The colour mode as a reader switches it: a click on the theme's switch (it cycles auto, dark, light when the system
# prefers light, as headless Chromium does), then the end of the colour transitions the theme gives some elements,
# so that the audit reads the colours the reader ends up seeing. Returns the mode the page is then shown in.
SWITCH = """
const done = arguments[arguments.length - 1], wanted = arguments[0];
const button = [...document.querySelectorAll('.theme-switch-button')].find(b => b.offsetParent !== null);
if (!button) { done({error: 'no visible theme switch'}); } else {
  for (let i = 0; i < 3 && document.documentElement.dataset.theme !== wanted; i++) button.click();
  const transitions = document.getAnimations().filter(a => a instanceof CSSTransition).map(a => a.finished);
  Promise.allSettled(transitions).then(() => requestAnimationFrame(() => done(
    {theme: document.documentElement.dataset.theme, transitions: transitions.length})));
}
"""

# Forgets the reader's colour mode (the theme keeps it in localStorage, which a data: page has none of).
FORGET = "try { localStorage.clear(); } catch (e) {}"

# The looks of a page's text (SAMPLE's keys), to compare a mode switched in place with the same mode loaded.
LOOKS = SETTLE + "settle(() => {" + SAMPLE + "done([...looks.keys()].sort()); });"


@pytest.fixture(scope="module")
def tour(site, browser) -> tuple[dict[str, dict], dict[tuple[str, str], dict]]:
    """Every page of `_toc.yml`, loaded once, as a reader's first visit: ``(visits, audits)``.

    ``visits[page]``: what the server sent, what the page showed, what the console said. ``audits[page, mode]``: what
    AUDIT returned in each colour mode, the light one as the page first showed (no choice kept yet), the dark one
    after a click on the theme's switch (``SWITCH``). One load serves the three: loading a chapter costs more than
    auditing it."""
    from axe_core_python.base import AXE_SCRIPT

    visits: dict[str, dict] = {}
    audits: dict[tuple[str, str], dict] = {}
    looks: dict[str, list[str]] = {mode: [] for mode in MODES}  # audited already in each mode
    try:
        for page in toc_files():
            status, served_title = _served(site + page + ".html")
            browser.get_log("browser")  # the console from here on is this page's
            browser.get(site + page + ".html")
            state = browser.execute_async_script(INSPECT)
            state["console"] = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
            state.update(title=browser.title, status=status, served_title=served_title)
            visits[page] = state
            browser.execute_script(AXE_SCRIPT)  # axe.min.js from the installed wheel: nothing is downloaded
            for mode in MODES:
                if mode != MODES[0]:
                    switched = browser.execute_async_script(SWITCH, mode)
                    if switched.get("theme") != mode:
                        audits[page, mode] = {"error": f"the theme's switch did not give the {mode} mode: {switched}"}
                        continue
                audits[page, mode] = browser.execute_async_script(AUDIT, _run_only(mode), list(COLOUR_RULES),
                                                                  looks[mode])
                looks[mode] += audits[page, mode].get("looks", [])
                if f"{page}.html" == SCREENSHOTS["chapter-1"] and mode != MODES[0]:
                    _screenshot(browser, "chapter-1-dark")
            browser.execute_script(FORGET)  # the next page is a first visit again: no colour mode chosen yet
    finally:
        browser.execute_script(FORGET)  # the other tests see a first visit
    return visits, audits


@pytest.fixture(scope="module")
def visits(tour) -> dict[str, dict]:
    return tour[0]


@pytest.fixture(scope="module")
def audits(tour) -> dict[tuple[str, str], dict]:
    return tour[1]


def _run_only(mode: str) -> dict | None:
    """axe's options for the rules of a page in ``mode`` other than the colour rules (which AUDIT runs on its sample
    in both modes): every other A/AA rule in the light mode, none in the dark."""
    if mode == MODES[0]:
        return {"runOnly": {"type": "tag", "values": list(AXE_TAGS)},
                "rules": {rule: {"enabled": False} for rule in COLOUR_RULES}}
    return None


def test_the_switch_gives_the_looks_a_reader_s_choice_loads(site, browser) -> None:
    """The dark mode switched in place (as the tour audits it) shows every text of a chapter in the same colours,
    sizes and backgrounds as the page loaded with the dark mode chosen before (the theme's localStorage keys)."""
    url = site + SCREENSHOTS["chapter-1"]
    try:
        browser.get(url)
        first = browser.execute_async_script(LOOKS, None, None, [])
        switched = browser.execute_async_script(SWITCH, "dark")
        assert switched["theme"] == "dark", switched
        in_place = browser.execute_async_script(LOOKS, None, None, [])
        assert browser.execute_script("return localStorage.getItem('mode');") == "dark"  # what the theme keeps
        browser.get(url)
        loaded = browser.execute_async_script(LOOKS, None, None, [])
        assert browser.execute_script("return document.documentElement.dataset.theme;") == "dark"
    finally:
        browser.execute_script(FORGET)
    assert len(loaded) > 50 and set(first) != set(loaded), "the dark mode changed no colour of the page"
    assert in_place == loaded, ("looks that differ between the switched page and the page loaded dark:\n"
                                + "\n".join(sorted(set(in_place) ^ set(loaded))[:20]))


# A page with three faults the audit must report: faint text, an image without alt, a list without list items. The
# text is faint twice: on its own, and in a grey text of a look that passes on white (first) and fails on the
# grey box it is repeated in: the colour rules' sample must take both.
FAULTY_PAGE = ("data:text/html,<!doctype html><html lang='en'><head><title>faults</title></head><body><main>"
               "<article class='bd-article'><p style='color:%23999;background:%23aaa'>faint text</p>"
               "<p style='color:%23595959'>grey on white</p>"
               "<div style='background:%23333'><p id='boxed' style='color:%23595959'>grey on a dark box</p></div>"
               "<img src='data:image/gif;base64,R0lGODlhAQABAAAAACw='>"
               "<div role='list'><div role='doc-biblioentry'>an entry</div></div></article></main></body></html>")


def test_the_audit_reports_known_faults(browser) -> None:
    from axe_core_python.base import AXE_SCRIPT

    browser.get(FAULTY_PAGE)
    browser.execute_script(AXE_SCRIPT)
    state = browser.execute_async_script(AUDIT, _run_only("light"), list(COLOUR_RULES), [])
    assert "error" not in state, state
    contrast = [v for v in state["violations"] if v["id"] == "color-contrast"]
    assert len(contrast) == 1 and len(contrast[0]["nodes"]) == 2, contrast  # once, from the sample: both faint texts
    assert "#boxed" in {node["target"] for node in contrast[0]["nodes"]}, contrast
    again = browser.execute_async_script(AUDIT, None, list(COLOUR_RULES), state["looks"])  # as on the next page
    assert again["looks"] == [] and again["violations"] == [], again  # its looks were audited already
    found = {v["id"] for v in state["violations"]}
    assert {"color-contrast", "image-alt", "aria-required-children"} <= found, f"axe found only {found}"
    assert [_alt_problem(f["alt"]) for f in state["figures"]] == ["no text alternative"], state["figures"]
    # axe refuses a rule id it does not know
    state = browser.execute_async_script(AUDIT, _run_only("dark"), list(COLOUR_RULES), [])
    assert "error" not in state, state
    assert {v["id"] for v in state["violations"]} == {"color-contrast"}, state["violations"]


def test_axe_finds_no_wcag_violation_in_light_or_dark_mode(audits) -> None:
    errors = {key: state["error"] for key, state in audits.items() if "error" in state}
    assert not errors, f"axe could not audit these pages (page, mode): {errors}"
    wrong_mode = {key: state["theme"] for key, state in audits.items() if state["theme"] != key[1]}
    assert not wrong_mode, f"pages shown in another colour mode than the one chosen (page, mode): {wrong_mode}"
    found = [f"{page} [{mode}] {v['id']} ({v['impact']}): {node['target']} \N{EM DASH} {v['help']}. "
             + " ".join(node["summary"].split())[:300]
             for (page, mode), state in audits.items() for v in state["violations"] for node in v["nodes"]]
    assert not found, (f"{len(found)} WCAG 2 A/AA violations found by axe-core (page [mode] rule (impact): element "
                       "\N{EM DASH} what to fix):\n" + "\n".join(found[:80])
                       + (f"\n... and {len(found) - 80} more" if len(found) > 80 else ""))


def _alt_problem(alt: str) -> str | None:
    """Why ``alt`` does not say what a figure shows, or None when it may."""
    text = " ".join(alt.split())
    if not text:
        return "no text alternative"
    if FILE_NAME.fullmatch(text) or HASH.search(text):
        return f"a file name or hash as its text alternative: {text[:80]!r}"
    if text.lower().rstrip(".") in GENERIC:
        return f"a text alternative that only says there is a picture: {text!r}"
    return None


def test_every_figure_has_a_text_alternative(audits) -> None:
    figures = [(page, figure) for (page, mode), state in audits.items() if mode == MODES[0]
               for figure in state["figures"]]
    assert len(figures) > 20, f"the chapters show hardly any figures: {len(figures)}"
    missing = [f"{page}: <{figure['tag']}> {figure['src'].rsplit('/', 1)[-1][:40]}: {problem}"
               for page, figure in figures if (problem := _alt_problem(figure["alt"]))]
    assert not missing, (f"{len(missing)} figures without a text alternative that says what they show (give a "
                         "code cell's image metadata mystnb.image.alt, a markdown image its alt):\n"
                         + "\n".join(missing))


def test_alt_text_judge_tells_descriptions_from_file_names() -> None:
    # the judge of the figure test must itself be able to fail, on what Sphinx and myst-nb write by default
    digest = "3f5a0c9d2b7e41f6a8c0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a2"
    for alt in ("", "  ", f"../_images/{digest}.png", f"{digest}.png", digest, "book/images/qkv.svg", "qkv.svg",
                "Figure", "image"):
        assert _alt_problem(alt), f"{alt!r} passed as a description"
    for alt in ("Heatmap of the weights: rows A and B, columns A and B, 0.12 and 0.88 in row A.",
                "Block diagram: X times W_q, W_k and W_v gives Q, K and V.", "Attention from Scratch"):
        assert _alt_problem(alt) is None, f"{alt!r} was refused"


def test_every_page_loads_without_console_errors(visits) -> None:
    not_found = {page: state["status"] for page, state in visits.items() if state["status"] != 200}
    assert not not_found, f"pages of _toc.yml the built book does not have (HTTP status): {not_found}"
    problems = {page: [e["message"][:300] for e in state["console"]] for page, state in visits.items()
                if state["console"] or state.get("error")}
    assert not problems, f"console errors: {problems}"
    # Sphinx titles every page "<its title> — <the book's title>"; the browser must show the page it was sent
    book = yaml.safe_load((REPO_ROOT / "_config.yml").read_text())["title"]
    untitled = {page: state["title"] for page, state in visits.items()
                if state["title"] != state["served_title"] or not state["title"].endswith(f" \N{EM DASH} {book}")}
    assert not untitled, f"pages whose title is not their own within the book: {untitled}"


def test_maths_is_typeset_everywhere(visits) -> None:
    # Sphinx loads MathJax only on pages with maths
    missing = [page for page, state in visits.items() if state["maths"] and not state["mathjax"]]
    assert not missing, f"pages with maths where MathJax did not load: {missing}"
    raw = {page: marker for page, state in visits.items() for marker in ("$$", "\\(", "\\[", "\\begin{")
           if marker in state["text"]}
    assert not raw, f"raw TeX left on the page (maths not typeset): {raw}"
    untypeset = {page: f"{s['typeset']}/{s['maths']}" for page, s in visits.items() if s["typeset"] < s["maths"]}
    assert not untypeset, f"maths elements that MathJax did not render (typeset/total): {untypeset}"
    with_maths = [page for page, state in visits.items() if state["typeset"]]
    assert "book/01_self_attention" in with_maths and "book/notation" in with_maths, with_maths


def test_every_image_loads(visits) -> None:
    broken = {page: [i["src"] for i in state["images"] if not i["ok"]] for page, state in visits.items()}
    broken = {page: srcs for page, srcs in broken.items() if srcs}
    assert not broken, f"images that did not load: {broken}"
    assert sum(len(state["images"]) for state in visits.values()) > 20, "the chapters show hardly any images"


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs) -> None:
        for name, value in attrs:
            if name in ("id", "name") and value:
                self.ids.add(value)


def test_internal_links_resolve(site, visits) -> None:
    targets: dict[str, set[str]] = {}
    for state in visits.values():
        for link in state["links"]:
            if link.startswith(site):
                url, fragment = urldefrag(link)
                targets.setdefault(url, set()).add(fragment)
    assert len(targets) > len(visits), "hardly any internal links were found"
    broken = []
    for url, fragments in sorted(targets.items()):
        try:
            with urllib.request.urlopen(url, timeout=30) as response:
                body = response.read()
        except urllib.error.HTTPError as err:
            broken.append(f"{url}: HTTP {err.code}")
            continue
        if urlparse(url).path.endswith((".html", "/")):
            anchors = _Anchors()
            anchors.feed(body.decode("utf-8", "replace"))
            broken += [f"{url}#{f}: no such anchor" for f in sorted(fragments) if f and f not in anchors.ids]
    assert not broken, "internal links that do not resolve:\n" + "\n".join(broken[:30])


def test_search_for_mask_finds_the_masking_chapter(site, browser) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(site + "search.html?q=mask")
    results = WebDriverWait(browser, 60).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, "#search-results ul.search li a") or None)
    hrefs = [urldefrag(a.get_attribute("href"))[0] for a in results]
    assert urljoin(site, "book/02_causal_masking.html") in hrefs, f"search for 'mask' found: {hrefs}"
    _screenshot(browser, "search-mask")


def _screenshot(browser, name: str) -> Path:
    folder = ARTIFACTS / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    assert browser.save_screenshot(str(path)), f"no screenshot of {name}"
    return path


def test_screenshots_are_kept_as_artifacts(site, browser) -> None:
    for name, page in SCREENSHOTS.items():
        browser.get(site + page)
        browser.execute_async_script(INSPECT)
        path = _screenshot(browser, name)
        data = path.read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) > 20_000, f"{path} is not a real screenshot"
