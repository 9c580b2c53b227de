"""Desktop session start, request to usable screen: on a LocalCluster of one node of simulated
L40S GPUs behind the default gateway (HAProxy where installed), each session is asked for
through the API (``createService`` with the spec ``gpufleet desktop run --graphics`` sends),
then a headless Chromium signs in on the gateway's page with the owner's token (retrying
while the endpoint has no ready backend) and polls screenshots until noVNC shows the X
session's root colour over most of the page: that instant is "usable". Sessions one after
another (each removed before the next); median and p90, and the share before the service
said it was ready.

    PYTHONPATH=src .venv/bin/python bench/desktop_start.py --sessions 10
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from PIL import Image
from playwright import sync_api

from gpufleet.api.schemas import TokenCreate
from gpufleet.cli.desktop import spec_of
from gpufleet.client import Client
from gpufleet.ops.localcluster import LocalCluster

SEA_GREEN = (46, 139, 87)
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"]


def green(png: bytes) -> float:
    img = Image.open(io.BytesIO(png)).convert("RGB").resize((160, 100))
    px = list(img.get_flattened_data() if hasattr(img, "get_flattened_data") else img.getdata())
    return sum(all(abs(a - b) <= 3 for a, b in zip(p, SEA_GREEN, strict=True)) for p in px) / len(
        px
    )


def one(c: Client, token: str, browser: sync_api.Browser, name: str) -> tuple[float, float]:
    """(request → ready said by the API, request → usable screen) in seconds."""
    spec = spec_of(name, gpus=1, share=None, graphics=True, idle_s=1800, geometry="1280x800",
                   program="", python=sys.executable, queue=None)  # fmt: skip
    ready_s = None
    t0 = time.monotonic()
    made = c.create_service(spec)
    url = made.desktop.open_url if made.desktop is not None else None
    assert url, made
    ctx = browser.new_context(viewport={"width": 1280, "height": 800})
    pg = ctx.new_page()
    try:
        # sign in (the gateway answers it itself), then the "starting" page reloads itself
        # every second until the replica is ready and noVNC draws the session
        while True:  # the endpoint listens once the proxy applied it (a moment after)
            try:
                pg.goto(url)
                break
            except sync_api.Error:
                time.sleep(0.05)
        pg.fill("#token", token)
        pg.click("button[type=submit]")
        stuck = time.monotonic() + 120
        while (png := _shot(pg)) is None or green(png) < 0.5:
            if ready_s is None and c.service(name).ready:
                ready_s = time.monotonic() - t0
            if time.monotonic() > stuck:
                pg.screenshot(path=f"/tmp/{name}-stuck.png")
                raise TimeoutError(f"{name}: no usable screen in 120 s ({pg.url})")
            time.sleep(0.05)  # a benchmark polling a live system: no clock to inject
        usable = time.monotonic() - t0
    finally:
        ctx.close()
    if ready_s is None:
        ready_s = usable
    c.delete_service(name)
    while any(s.name == name for s in c.services()):
        time.sleep(0.2)
    return ready_s, usable


def _shot(pg: sync_api.Page) -> bytes | None:
    """A screenshot; None while Chromium cannot take one (the "starting" page reloads itself
    every second, and a capture that meets a navigation fails: "Unable to capture screenshot")."""
    try:
        return pg.screenshot()
    except sync_api.Error:
        return None


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p * (len(xs) - 1)))]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sessions", type=int, default=10)
    a = p.parse_args(argv)
    os.environ["PATH"] = f"{Path(sys.executable).parent}:{os.environ['PATH']}"
    with tempfile.TemporaryDirectory(dir="/var/tmp") as d:
        cl = LocalCluster(Path(d) / "c", agents=1, gpus="2xL40S", schedule_interval_s=0.5,
                          heartbeat_s=0.5).start()  # fmt: skip
        try:
            cl.wait_nodes(1)
            with cl.admin() as admin:
                tok = admin.create_token(TokenCreate(name="bench", role="user", user="alice"))
            assert tok.token
            rows = []
            with sync_api.sync_playwright() as pw, Client(cl.url, tok.token) as c:
                browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
                for i in range(a.sessions):
                    ready_s, usable_s = one(c, tok.token, browser, f"bench-{i}")
                    rows.append((ready_s, usable_s))
                    print(f"session {i}: ready (API) {ready_s:.2f} s, usable screen "
                          f"{usable_s:.2f} s (load {os.getloadavg()[0]:.1f})",
                          flush=True)  # fmt: skip
                browser.close()
        finally:
            cl.stop()
    usable = [u for _, u in rows]
    ready = [r for r, _ in rows]
    print(f"{len(rows)} sessions, gateway {cl.gateway or 'default'}: usable screen median "
          f"{statistics.median(usable):.2f} s, p90 {pct(usable, 0.9):.2f} s; ready (API) median "
          f"{statistics.median(ready):.2f} s, p90 {pct(ready, 0.9):.2f} s")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
