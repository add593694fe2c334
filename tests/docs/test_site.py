"""The documentation site as a reader sees it: built strict, served on loopback and
opened in headless Chromium (Debian's package, driven by Playwright with no browser
download). Screenshots of three pages are kept in ``site-screenshots/`` (or
``$ZARREXT_ARTIFACTS``)."""

from __future__ import annotations

import functools
import html.parser
import os
import shutil
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# what the workplace's Chromium needs headless: no sandbox as root, no network beyond
# loopback (background services would try to reach out)
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync"]
SCREENSHOTS = {"home": "index.html", "guide": "guide/conditional.html",
               "api": "reference/api.html"}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    mkdocs = Path(sys.executable).with_name("mkdocs")
    done = subprocess.run([str(mkdocs), "build", "--strict", "-q", "-d", str(out)], cwd=ROOT,
                          capture_output=True, text=True, env={**os.environ,
                                                               "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if CHROMIUM is None:
        pytest.skip("no chromium on this machine (apt-get install chromium; .ci/run does)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS,
                                              headless=True)
        yield chromium
        chromium.close()


def _artifacts() -> Path:
    folder = Path(os.environ.get("ZARREXT_ARTIFACTS", ROOT / "site-screenshots"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.mark.parametrize("name", sorted(SCREENSHOTS))
def test_a_page_renders(browser: object, served: str, name: str) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 900})  # type: ignore[attr-defined]
    page.goto(f"{served}/{SCREENSHOTS[name]}")
    heading = page.inner_text("article h1")
    assert heading.strip()
    assert page.inner_text("nav.md-nav--primary").count("\n") > 10  # the navigation drew
    shot = _artifacts() / f"{name}.png"
    page.screenshot(path=str(shot))
    assert shot.stat().st_size > 20_000  # a drawn page, not a blank one
    page.close()


def test_the_api_reference_documents_every_public_name(browser: object, served: str) -> None:
    import zarrext

    page = browser.new_page()  # type: ignore[attr-defined]
    page.goto(f"{served}/reference/api.html")
    documented = set(page.eval_on_selector_all(
        "article h2.doc-heading", "els => els.map(e => e.id)"))
    page.close()
    names = {name.rsplit(".", 1)[-1] for name in documented}
    assert set(zarrext.__all__) <= names, set(zarrext.__all__) - names


def test_search_finds_compress_if_smaller(browser: object, served: str) -> None:
    page = browser.new_page()  # type: ignore[attr-defined]
    page.goto(f"{served}/index.html?q=compress_if_smaller")
    page.wait_for_selector(".md-search-result__item")
    found = page.eval_on_selector_all(".md-search-result__item a",
                                      "els => els.map(e => e.getAttribute('href'))")
    page.close()
    assert any(link.split("?")[0].endswith("guide/conditional.html") for link in found), found


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if values.get("id"):
            self.ids.add(str(values["id"]))
        if tag == "a" and values.get("href"):
            self.links.append(str(values["href"]))


def _parsed(page: Path) -> _Links:
    parser = _Links()
    parser.feed(page.read_text())
    return parser


def test_no_page_has_a_broken_internal_link(site: Path) -> None:
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 20
    parsed = {page: _parsed(page) for page in pages}
    broken = []
    for page, found in parsed.items():
        for link in found.links:
            url = urllib.parse.urlsplit(link)
            if url.scheme or url.netloc or link.startswith("mailto:"):
                continue
            path = urllib.parse.unquote(url.path)
            if not path:
                target = page
            elif path.startswith("/"):  # the 404 page links from the site's root
                target = site / path.lstrip("/")
            else:
                target = (page.parent / path).resolve()
            if target.is_dir():
                target = target / "index.html"
            if not target.is_file():
                broken.append(f"{page.relative_to(site)}: {link}")
            elif url.fragment and target.suffix == ".html" and \
                    url.fragment not in parsed.get(target, _parsed(target)).ids:
                broken.append(f"{page.relative_to(site)}: {link} (no such anchor)")
    assert broken == []
