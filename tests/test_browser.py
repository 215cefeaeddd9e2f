"""The built book in a real browser: Debian's Chromium, headless, driven through its chromedriver.

The book is built once for the session (``built_html``), served on localhost, and every page of
``_toc.yml`` is visited: it must load without a console error, its maths must be typeset by MathJax (no raw
``$$`` or ``\\(`` left on the page), every image must load and every internal link must resolve. A search for
"mask" must find the masking chapter. Screenshots of a few pages are kept as test artifacts under
``$TEST_ARTIFACTS`` (default ``_build/test-artifacts``).

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

# Waits for the page, then for MathJax (when the page loads it) to finish typesetting; returns what the checks
# need. Text inside code blocks is left out of the raw-maths check: a `$` in code is code, not maths.
INSPECT = """
const done = arguments[arguments.length - 1];
const report = () => {
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
};
const settle = () => (window.MathJax && window.MathJax.startup && window.MathJax.startup.promise)
  ? window.MathJax.startup.promise.then(report, e => done({error: String(e)})) : report();
if (document.readyState === 'complete') settle(); else window.addEventListener('load', settle);
"""


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


@pytest.fixture(scope="module")
def visits(site, browser) -> dict[str, dict]:
    """Every page of `_toc.yml`, loaded once: what the server sent, what the page showed, what the console said."""
    seen = {}
    browser.get_log("browser")  # start from an empty console
    for page in toc_files():
        status, served_title = _served(site + page + ".html")
        browser.get(site + page + ".html")
        state = browser.execute_async_script(INSPECT)
        state["console"] = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
        state.update(title=browser.title, status=status, served_title=served_title)
        seen[page] = state
    return seen


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
