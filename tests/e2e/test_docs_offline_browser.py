"""The API docs and the dashboard in a real headless Chromium (Debian's ``chromium`` through
Playwright) with the network cut: every request that is not to the controller is refused and
recorded (and no host name resolves but the controller's 127.0.0.1). Swagger UI renders the
controller's operations from the package's own files, and neither page asks for anything
elsewhere. ``tests/integration/test_offline_pages.py`` checks the served text itself."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import realparts
from gpufleet.base.clock import ManualClock
from gpufleet.server.app import create_app
from gpufleet.server.config import ServerConfig
from gpufleet.server.store import Store
from support import ports
from support.serving import serve_app

pytestmark = [pytest.mark.e2e, pytest.mark.requires("chromium")]

try:
    from playwright import sync_api
except ImportError:  # the "chromium" check of each test says so
    sync_api = None  # type: ignore[assignment]

ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
    # the network cut: no name resolves (the controller is 127.0.0.1, no name)
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
]


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("docs")
    store = Store.open(f"sqlite:///{tmp / 'gpufleet.db'}")
    cfg = ServerConfig(data_dir=tmp / "controller", min_pass_gap_s=0.0, **ports.gateway_ports())
    app = create_app(cfg, store=store, clock=ManualClock(1_700_000_000.0))
    try:
        with serve_app(app) as u:
            yield u
    finally:
        store.close()


def _offline_page(browser: Any, url: str, elsewhere: list[str], errors: list[str]) -> Any:
    ctx = browser.new_context(viewport={"width": 1280, "height": 800})

    def route(r: Any) -> None:
        if r.request.url.startswith(url + "/"):
            r.continue_()
        else:
            elsewhere.append(r.request.url)
            r.abort()

    ctx.route("**/*", route)
    pg = ctx.new_page()
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.on("requestfailed", lambda q: errors.append(f"failed: {q.url}"))
    pg.set_default_timeout(90_000)  # a wait for a state: it ends when it is there
    return pg


def test_the_api_docs_and_the_dashboard_render_with_the_network_cut(
    url: str, tmp_path: Path
) -> None:
    assert realparts.CHROMIUM
    elsewhere: list[str] = []
    errors: list[str] = []
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=realparts.CHROMIUM, headless=True, args=ARGS)
        try:
            pg = _offline_page(b, url, elsewhere, errors)
            pg.goto(url + "/api/v1/docs")
            pg.wait_for_selector(".swagger-ui .opblock")
            ops = pg.locator(".swagger-ui .opblock").count()
            assert ops >= 20, ops  # every operation of the API, rendered
            assert "gpufleet" in pg.locator(".swagger-ui .info .title").inner_text()
            pg.screenshot(path=str(tmp_path / "docs.png"))
            print(f"screenshot: {tmp_path / 'docs.png'}")
            pg.goto(url + "/")
            pg.wait_for_selector("#login-form")
            assert pg.locator("#login-form").is_visible()
        finally:
            b.close()
    assert not elsewhere, f"the pages asked for: {elsewhere}"
    assert not errors, errors
