"""Offline-complete web pages: every page and file the controller serves outside its JSON API
(the dashboard, its files, the API docs and Swagger UI's files) is fetched from a real
controller (uvicorn on 127.0.0.1), and none of them names a URL outside the controller where a
browser would load it: an offline cluster's pages work as they are. ReDoc (whose FastAPI page
loads from a CDN) is not served at all. ``tests/e2e/test_docs_offline_browser.py`` loads the
pages in a headless Chromium with the network cut."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gpufleet.base.clock import ManualClock
from gpufleet.server import swagger_ui
from gpufleet.server.app import create_app
from gpufleet.server.config import ServerConfig
from gpufleet.server.routers.dashboard import ASSETS
from gpufleet.server.store import Store
from support import ports
from support.serving import serve_app

URL = re.compile(r"https?://[^\s\"'<>()\\`,;]*", re.IGNORECASE)
# names, never fetched: XML namespaces (an SVG's xmlns) and the schema dialects Swagger UI
# compares a document's "$schema" with
NAMESPACES = ("http://www.w3.org/",)
# where a page or style sheet loads from: attributes and CSS
LOADS = re.compile(
    r"""(?:\b(?:src|href|action|poster|data)\s*=\s*["']?|url\(\s*["']?|@import\s+["']?)"""
    r"""(https?:)?//""",
    re.IGNORECASE,
)
# Swagger UI's bundle (vendored byte for byte, its hashes checked) holds URLs as text: the RFCs
# and specs its code cites, JSON Schema and OpenAPI dialect identifiers it compares, link
# examples of its Markdown sanitizer. It fetches none of them (the browser test shows it with
# the network cut); the validator badge, the one it would load, is turned off
# (validatorUrl: null). A new version that names a new host fails here, to be looked at.
BUNDLE_HOSTS = {
    "datatracker.ietf.org",
    "www.rfc-editor.org",
    "www.w3.org",
    "spec.openapis.org",
    "json-schema.org",
    "github.com",
    "validator.swagger.io",
    "example.com",
    "swagger.io",
    "spdx.org",
    "redux.js.org",
    "reactjs.org",
    "fb.me",
    "vladimirgorej.com",
    "twitter.com",
    "www.tiktok.com",
    "instagram.com",
    "www.facebook.com",
    "soundcloud.com",
    "실례.com",
    "tailwindcss.com",  # the style sheet's licence comment
    "base${String",  # `https://base${String(Math.random())}`: a made-up base to resolve against
}
CDNS = ("jsdelivr", "unpkg", "cdnjs", "googleapis", "gstatic", "bootstrapcdn", "cloudflare")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, object]]:
    tmp = tmp_path_factory.mktemp("offline")
    store = Store.open(f"sqlite:///{tmp / 'gpufleet.db'}")
    cfg = ServerConfig(data_dir=tmp / "controller", min_pass_gap_s=0.0, **ports.gateway_ports())
    app = create_app(cfg, store=store, clock=ManualClock(1_700_000_000.0))
    try:
        with serve_app(app) as url:
            yield url, app
    finally:
        store.close()


# the pages; and every file the controller serves for them (each also reached by the crawl)
PAGES = ("/", "/api/v1/docs")
FILES = (
    *(f"/dashboard/{n}" for n in ASSETS),
    *(f"/api/v1/docs/{n}" for n in swagger_ui.FILES),
    "/api/v1/openapi.json",  # what the docs page loads
)
SAME_ORIGIN = re.compile(r"""(?:\b(?:src|href)\s*=\s*["']|url\(\s*["']?)(/[^"')\s]*)""")


def _crawl(url: str) -> dict[str, bytes]:
    """Every page and file, and whatever same-origin path they reference, fetched (each 200)."""
    todo, got = [*PAGES, *FILES], {}
    while todo:
        path = todo.pop()
        if path in got:
            continue
        r = httpx.get(url + path, timeout=30)
        assert r.status_code == 200, (path, r.status_code)
        got[path] = r.content
        if path.endswith((".js", ".json")):
            continue  # scripts load nothing by attribute; their text is checked below
        text = r.content.decode("utf-8", "replace")
        todo += [m.split("#")[0] for m in SAME_ORIGIN.findall(text) if not m.startswith("//")]
    return got


def _external(text: str, own: str) -> list[str]:
    return [u for u in URL.findall(text) if not u.startswith(own) and not u.startswith(NAMESPACES)]


def test_every_page_and_file_loads_from_the_controller_alone(server: tuple[str, object]) -> None:
    url, _ = server
    got = _crawl(url)
    assert {"/", "/api/v1/docs", "/dashboard/app.js", "/api/v1/docs/swagger-ui-bundle.js"} <= set(
        got
    )
    vendored = {"/api/v1/docs/" + n for n in swagger_ui.FILES}
    found: dict[str, list[str]] = {}
    for path, body in got.items():
        if swagger_ui.FILES.get(path.rsplit("/", 1)[-1], "").startswith("text/plain"):
            continue  # the licences: shown as text, never rendered (their URLs are citations)
        text = body.decode("utf-8", "replace")
        loads = [m.group(0) for m in LOADS.finditer(text)]
        assert not loads, f"{path} loads from elsewhere: {loads[:5]}"
        assert not [c for c in CDNS if c in text.lower()], f"{path} names a CDN"
        ext = _external(text, url)
        if path in vendored:
            hosts = {re.sub(r"^https?://", "", u).split("/")[0] for u in ext} - {""}
            assert hosts <= BUNDLE_HOSTS, f"{path}: new hosts {sorted(hosts - BUNDLE_HOSTS)}"
        elif ext:
            found[path] = ext
    assert not found, f"external URLs in served pages: {found}"
    # the docs page: every file from here, the validator badge off
    page = httpx.get(url + "/api/v1/docs").text
    for f in ("swagger-ui-bundle.js", "swagger-ui.css", "favicon-32x32.png"):
        assert f'"/api/v1/docs/{f}"' in page
    assert '"validatorUrl": null' in page


def test_no_redoc_and_no_fastapi_default_docs(server: tuple[str, object]) -> None:
    url, _ = server
    for path in ("/redoc", "/docs", "/api/v1/redoc", "/api/v1/docs/oauth2-redirect"):
        assert httpx.get(url + path, timeout=30).status_code == 404, path
    r = httpx.get(url + "/api/v1/docs/../app.py", timeout=30)
    assert r.status_code == 404


def test_the_vendored_swagger_ui_is_the_published_one_with_its_licence() -> None:
    here = Path(swagger_ui.__file__).parent
    assert set(swagger_ui.SHA256) == set(swagger_ui.FILES)
    for name, digest in swagger_ui.SHA256.items():
        assert hashlib.sha256((here / name).read_bytes()).hexdigest() == digest, name
    assert "Apache License" in (here / "LICENSE").read_text()
    # only what the page needs: no source maps, no other bundles
    assert {p.name for p in here.iterdir() if p.name != "__pycache__"} == {
        *swagger_ui.FILES,
        "__init__.py",
    }
