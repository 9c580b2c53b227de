"""A desktop session opened in a real headless Chromium through the service gateway (HAProxy,
the default where installed, and nginx, whose auth_request asks the gateway's viewer check:
ADR 0057; the module runs once per proxy), on a live cluster whose node has
simulated L40S GPUs: alice starts it with ``gpufleet desktop run`` (her token in the
environment, never on the command line), signs in on the gateway's page with her own token,
and noVNC shows the X session, whose root window the session painted sea green: the test
reads that colour in the screenshot's pixels. Bob's token is refused (the login form, a
bearer, the WebSocket); the dashboard lists the session with its link; closed and left idle
past its limit, the session is suspended (its replica stops) and ``desktop run`` resumes it.

Xvfb stands in for a GPU X server (none here: no GPU); the screenshots' paths are printed
(copies go to ``$GPUFLEET_SCREENSHOTS`` when it is set)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from livehelp import headless_chromium, keep_screenshots, wait_for
from test_dashboard_browser import ARGS, CHROMIUM, make_user, sign_in

from gpufleet.gateway import viewers as v
from gpufleet.ops.localcluster import LocalCluster

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.requires("chromium", "xvfb", "xsetroot", "x11vnc", "websockify"),
]

SEA_GREEN = (46, 139, 87)  # gpufleet.ops.desktop's default root colour, #2e8b57
IDLE_S = 20


def cli(token: str, *args: str, url: str) -> str:
    env = {**os.environ, "GPUFLEET_SERVER": url, "GPUFLEET_TOKEN": token, "COLUMNS": "200"}
    done = subprocess.run(
        [sys.executable, "-m", "gpufleet.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


def green_share(png: bytes) -> float:
    """The share of the screenshot's pixels that are the session's root colour."""
    from PIL import Image

    img = Image.open(io.BytesIO(png)).convert("RGB")
    pixels = (
        list(img.get_flattened_data())
        if hasattr(img, "get_flattened_data")
        else list(img.getdata())
    )
    close = sum(
        1 for p in pixels if all(abs(a - b) <= 3 for a, b in zip(p, SEA_GREEN, strict=True))
    )
    return close / len(pixels)


@pytest.fixture(scope="module", params=["haproxy", "nginx"])
def env(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[dict[str, Any]]:
    base = tmp_path_factory.mktemp(f"desktop-{request.param}")
    c = LocalCluster(
        base / "cluster",
        agents=1,
        gpus="2xL40S",
        heartbeat_s=0.5,
        schedule_interval_s=0.5,
        gateway=request.param,
        controller_args=["--gateway-stats-s", "1"],
    )
    try:
        c.start()
        users = {n: make_user(c, n) for n in ("alice", "bob")}
        shots = base / "screenshots"
        shots.mkdir()
        yield {"cluster": c, "users": users, "shots": shots, "proxy": request.param}
    finally:
        c.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with headless_chromium(CHROMIUM, ARGS) as b:
        yield b


def shoot(pg: Any, env: dict[str, Any], name: str) -> bytes:
    path = env["shots"] / f"{name}-{env['proxy']}.png"
    png = pg.screenshot(path=str(path))
    print(f"screenshot: {path}")
    keep_screenshots(path)
    return bytes(png)


def test_a_desktop_through_the_gateway_for_its_owner_only(
    env: dict[str, Any], browser: Any
) -> None:
    c: LocalCluster = env["cluster"]
    _, alice, _ = env["users"]["alice"]
    _, bob, _ = env["users"]["bob"]
    said = cli(
        alice,
        "desktop",
        "run",
        "studio",
        "--graphics",
        "--idle",
        f"{IDLE_S}s",
        "--python",
        sys.executable,
        "--wait",
        "90",
        url=c.url,
    )
    assert "desktop studio: ready" in said, said
    shown = json.loads(cli(alice, "desktop", "show", "studio", "--json", url=c.url))
    open_url = shown["desktop"]["open_url"]
    assert open_url.endswith(v.LOGIN), shown
    (replica,) = shown["replicas"]
    assert replica["node"] == "node-0"
    base = open_url[: -len(v.LOGIN)]

    # bob: his token opens nothing of alice's desktop
    assert httpx.post(open_url, data={"token": bob}).status_code == 403
    r = httpx.get(base + "/vnc.html", headers={"Authorization": f"Bearer {bob}"})
    assert r.status_code == 403
    r = httpx.get(
        base + "/websockify",
        headers={
            "Cookie": f"{v.COOKIE}={bob}",
            "Connection": "Upgrade",
            "Upgrade": "websocket",
            "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
            "Sec-WebSocket-Version": "13",
        },
    )
    assert r.status_code == 403
    ctx = browser.new_context(viewport={"width": 1280, "height": 800})
    pg = ctx.new_page()
    pg.goto(open_url)
    pg.fill("#token", bob)
    pg.click("button[type=submit]")
    assert "only its owner" in pg.content()
    assert green_share(shoot(pg, env, "desktop-bob-refused")) == 0.0
    ctx.close()

    # alice: her own token, through the login page, to noVNC and the X session's pixels
    ctx = browser.new_context(viewport={"width": 1280, "height": 800})
    pg = ctx.new_page()
    pg.set_default_timeout(30_000)
    pg.goto(open_url)
    pg.fill("#token", alice)
    pg.click("button[type=submit]")
    pg.wait_for_url("**/vnc.html*")
    shares: list[float] = []

    def painted() -> bool:
        shares.append(green_share(pg.screenshot()))
        return shares[-1] > 0.5

    wait_for("noVNC shows the X session's root colour", painted, 30)
    png = shoot(pg, env, "desktop-alice")
    assert green_share(png) > 0.5, shares
    cookies = {k["name"]: k for k in ctx.cookies()}
    assert cookies[v.COOKIE]["httpOnly"] and cookies[v.COOKIE]["sameSite"] == "Strict"

    # the dashboard lists it, with the link to open it
    dash = ctx.new_page()
    sign_in(dash, c.url, alice)
    dash.goto(c.url + "/#/services")
    opener = dash.locator("a.desktop-open")
    opener.wait_for(state="visible")
    assert opener.get_attribute("href") == open_url
    shoot(dash, env, "desktop-dashboard")
    dash.close()
    ctx.close()  # the WebSocket closes: from now on the session is idle

    def suspended() -> bool:
        s = json.loads(cli(alice, "desktop", "show", "studio", "--json", url=c.url))
        return s["desktop"]["suspended"] and not any(
            r["state"] in ("RUNNING", "STARTING") for r in s["replicas"]
        )

    wait_for("the idle desktop is suspended", suspended, IDLE_S + 60)
    listed = cli(alice, "desktop", "ls", url=c.url)
    assert "suspended" in listed, listed
    said = cli(alice, "desktop", "run", "studio", "--wait", "90", url=c.url)
    assert "desktop studio: ready" in said, said
    cli(alice, "desktop", "rm", "studio", url=c.url)
