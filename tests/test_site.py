"""The documentation site: it builds with ``mkdocs build --strict``, every internal link and
anchor of every page resolves, each encoding has its page and its figures.

The fast build sets ``POSENC_DOCS_FIGURES=0`` (the hook writes a blank placeholder for each
figure, so the links are still checked); the slow one draws every figure as ``make docs``
does and checks the files are real PNGs. The fast site is also rendered by headless Chromium
at 1280 px: nothing on a page is wider than its text column (code blocks scroll inside
themselves, an encoding's formula wraps).
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

import posenc
from posenc.plot import PLOTS

ROOT = Path(__file__).resolve().parents[1]
HOOK = ROOT / "docs" / "_hooks" / "posenc_docs.py"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
CHROMIUM = "/usr/bin/chromium"

pytest.importorskip("mkdocs")
pytest.importorskip("material")


def load_hook():
    spec = importlib.util.spec_from_file_location("posenc_docs_hook", HOOK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Page(HTMLParser):
    """The ``href``/``src`` targets and the ``id``/``name`` anchors of one HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.anchors: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for key, value in attrs:
            if value is None:
                continue
            if key in ("href", "src"):
                self.links.append(value)
            elif key == "id" or (key == "name" and tag == "a"):
                self.anchors.add(value)


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def broken_links(site: Path) -> list[str]:
    """Every local ``href``/``src`` of every HTML page under ``site`` (``/x`` from the site's
    root, as a server would serve it) that names a missing file, or a ``#fragment`` missing
    from the HTML page it points to: ``"page: link"``."""
    pages = {p: _parse(p) for p in sorted(site.rglob("*.html"))}
    broken = []
    for path, page in pages.items():
        for link in page.links:
            parts = urlsplit(link)
            if parts.scheme or link.startswith("//"):
                continue  # external (http, https, mailto, data): not checked offline
            if not parts.path:
                target = path
            elif parts.path.startswith("/"):  # from the site's root (mkdocs' 404.html)
                target = (site / unquote(parts.path).lstrip("/")).resolve()
            else:
                target = (path.parent / unquote(parts.path)).resolve()
            if parts.path.endswith("/") or target.is_dir():
                target = target / "index.html"
            if not target.is_file() or site.resolve() not in target.resolve().parents:
                broken.append(f"{path.relative_to(site)}: {link}")
                continue
            fragment = unquote(parts.fragment)
            if fragment and target.suffix == ".html":
                anchors = (pages.get(target) or _parse(target)).anchors
                if fragment not in anchors:
                    broken.append(f"{path.relative_to(site)}: {link} (no such anchor)")
    return broken


def build(out: Path, figures: bool) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "POSENC_DOCS_FIGURES": "1" if figures else "0"}
    env["NO_MKDOCS_2_WARNING"] = "1"
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(out)]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


# ---------------------------------------------------------------- the link checker itself


def test_broken_links_finds_missing_files_and_anchors(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "img.png").write_bytes(PNG_SIGNATURE)
    (tmp_path / "sub" / "page.html").write_text('<h2 id="here">x</h2><a href="#here">self</a>')
    (tmp_path / "index.html").write_text(
        '<a href="sub/page.html#here">ok</a> <img src="img.png"> <a href="sub/">dir</a>'
        '<a href="/sub/page.html">root</a> <a href="/nope.html">bad root</a>'
        '<a href="https://example.org/missing">external</a> <a href="mailto:a@b.c">mail</a>'
        '<a href="sub/page.html#nowhere">bad anchor</a> <img src="missing.png">'
        '<a href="#top">bad self anchor</a> <a href="../outside.html">outside</a>'
    )
    (tmp_path / "sub" / "index.html").write_text("<p>the folder's page</p>")
    assert broken_links(tmp_path) == [
        "index.html: /nope.html",
        "index.html: sub/page.html#nowhere (no such anchor)",
        "index.html: missing.png",
        "index.html: #top (no such anchor)",
        "index.html: ../outside.html",
    ]


def test_broken_links_accepts_a_whole_site(tmp_path):
    (tmp_path / "a.html").write_text('<a href="b.html#x">b</a>')
    (tmp_path / "b.html").write_text('<a id="x" href="a.html">a</a>')
    assert broken_links(tmp_path) == []


# ---------------------------------------------------------------- what the hook generates


def test_every_figure_kind_is_on_the_figures_page():
    hook = load_hook()
    blocks = hook.shown_blocks((ROOT / "docs" / "figures.md").read_text())
    drawn = {argv[1] for commands, _ in blocks for argv in commands if argv[0] == "plot"}
    missing = set(PLOTS) - drawn
    assert not missing, f"figures.md draws no {sorted(missing)}"


def test_every_encoding_gets_figures_of_its_kind():
    hook = load_hook()
    for name in posenc.available():
        kinds = [argv[1] for _, argv, _ in hook.figures_for(name)]
        assert "similarity" in kinds, name
        enc = posenc.registry.get(name)
        if enc.kind == "bias":
            assert "bias" in kinds, name
        if enc.position_axes == 2:
            assert "grid" in kinds, name
        if enc.kind == "additive" and enc.position_axes == 1:
            assert "heatmap" in kinds, name


def test_shown_blocks_are_those_whose_files_the_page_shows():
    hook = load_hook()
    page = (
        "```sh\nposenc arena run all --preset tiny --out runs/t  # a run first\n"
        "posenc plot attention --run runs/t --out figures/a.png\n```\n![a](figures/a.png)\n"
        "```sh\nposenc plot rotation --out b.png\nposenc list\n```\n"
    )
    assert hook.shown_blocks(page) == [
        (
            [
                ["arena", "run", "all", "--preset", "tiny", "--out", "runs/t"],
                ["plot", "attention", "--run", "runs/t", "--out", "figures/a.png"],
            ],
            ["figures/a.png"],
        )
    ]


# ---------------------------------------------------------------- the site, built


def _check_site(site: Path) -> None:
    assert broken_links(site) == []
    hook = load_hook()
    for name in posenc.available():
        page = site / "encodings" / f"{name}.html"
        assert page.is_file(), f"no page for {name}"
        html = page.read_text()
        assert posenc.info(name).summary[1:] in html
        for file, _, _ in hook.figures_for(name):
            assert (site / "encodings" / "img" / file).is_file(), file
            assert f'src="img/{file}"' in html, f"{name}'s page does not show {file}"
    assert (site / "figures" / "heatmap.png").is_file()
    assert re.search(r"<h1[^>]*>Encodings", (site / "encodings" / "index.html").read_text())


@pytest.fixture(scope="module")
def fast_site(tmp_path_factory):
    """The site built once for the module, without figures: its folder."""
    site = tmp_path_factory.mktemp("fast") / "site"
    result = build(site, figures=False)
    assert result.returncode == 0, result.stderr
    return site


def test_site_builds_strict_with_no_broken_links(fast_site):
    _check_site(fast_site)


# ---------------------------------------------------------------- the site, rendered

#: For one rendered page: how far its text column (Material's ``.md-content``) overflows (its
#: content wider than the column: a code block that does not scroll inside itself, a table
#: or image that widens the column), the page past the window, and the formula blocks whose
#: lines do not fit (an encoding page's formula wraps; it is read whole, not scrolled).
MEASURE_PAGE = """() => {
    const column = document.querySelector(".md-content");
    const root = document.documentElement;
    const formulas = Array.from(document.querySelectorAll(".posenc-formula code"));
    return {
        column: column.scrollWidth - column.clientWidth,
        page: root.scrollWidth - window.innerWidth,
        formulas: formulas.length,
        unfit: formulas.filter(c => c.scrollWidth > c.clientWidth).length,
    };
}"""


def wider_than_the_column(page, url: str, html: str = "", css: str = "") -> tuple[list[str], int]:
    """What on page ``url``, rendered by the Playwright ``page`` at its viewport, is wider
    than the text column, and how many formula blocks the page has; ``html`` is added at the
    end of the article and ``css`` to the page first (the check of this check)."""
    page.goto(url, wait_until="load")
    if html:
        page.eval_on_selector(
            "article", "(a, html) => a.insertAdjacentHTML('beforeend', html)", html
        )
    if css:
        page.add_style_tag(content=css)
    width = page.evaluate(MEASURE_PAGE)
    found = [f"{key} {width[key]}" for key in ("column", "page") if width[key] > 0]
    if width["unfit"]:
        found.append(f"{width['unfit']} formula(s) do not fit")
    return found, width["formulas"]


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is not installed")
def test_no_page_is_wider_than_its_text_column_at_1280px(fast_site):
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    # Material's pages (not the arena's own reports under results/, tests/arena renders them)
    pages = [p for p in sorted(fast_site.rglob("*.html")) if 'class="md-content"' in p.read_text()]
    assert len(pages) > len(posenc.available()) + 10
    long_line = "x = 1  " * 60  # 420 characters, wider than any column
    code = f'<div class="highlight"><pre><code>{long_line}</code></pre></div>'
    formula = f'<div class="posenc-formula highlight"><pre><code>{long_line}</code></pre></div>'
    rope = (fast_site / "encodings" / "rope.html").as_uri()
    args = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=args)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            wide, formulas = {}, {}
            for path in pages:
                found, formulas[path.relative_to(fast_site)] = wider_than_the_column(
                    page, path.as_uri()
                )
                if found:
                    wide[str(path.relative_to(fast_site))] = found
            # a long line scrolls inside its code block and wraps inside a formula; the check
            # sees a code block that does not scroll and a formula that does not wrap
            fits = wider_than_the_column(page, rope, code + formula)
            spills = wider_than_the_column(
                page, rope, code, ".md-typeset pre > code {overflow: visible}"
            )
            unwrapped = wider_than_the_column(
                page, rope, formula, ".md-typeset .posenc-formula code {white-space: pre}"
            )
        finally:
            browser.close()
    assert wide == {}
    for name in posenc.available():  # the formula of each encoding is a block that wraps
        assert formulas[Path("encodings", f"{name}.html")] == 1, name
    assert fits[0] == []
    assert spills[0] and spills[0][0].startswith("column ")
    assert unwrapped[0] == ["1 formula(s) do not fit"]


@pytest.mark.slow
def test_site_with_figures(tmp_path):
    result = build(tmp_path / "site", figures=True)
    assert result.returncode == 0, result.stderr
    site = tmp_path / "site"
    _check_site(site)
    figures = sorted((site / "encodings" / "img").glob("*.png"))
    figures += sorted((site / "figures").glob("*.png"))
    assert len(figures) >= len(posenc.available()) + len(PLOTS)
    for path in figures:
        data = path.read_bytes()
        assert data.startswith(PNG_SIGNATURE) and len(data) > 5000, path
