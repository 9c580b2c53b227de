"""The README's desktop commands ("Graphics, video and desktops"), run as written by a user on
a live cluster of one L40S node: ``desktop run`` waits until the session is ready and prints
where to open it; that login page takes the user's own token (and refuses another user's),
and with the cookie it sets, noVNC's page comes through the gateway; ``desktop ls`` lists it.
Once the token is revoked, it opens the desktop no more."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpufleet.api.schemas import TokenCreate
from gpufleet.gateway import viewers as v
from gpufleet.ops.localcluster import LocalCluster
from support import plainhttp
from support.readme import blocks, lines, run_line, script_env, section
from support.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.requires("xvfb", "xsetroot", "x11vnc", "websockify")]


def test_the_readmes_desktop_commands_run_as_written(
    new_cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = section("Graphics, video and desktops")
    sh = blocks(text)[4]
    # the nodes' python3 is this venv's (gpufleet installed), as a node's `pip install gpufleet`
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    c: LocalCluster = new_cluster(agents=1, gpus="2xL40S")
    c.wait_nodes(1)
    tokens = {}
    with c.admin() as a:
        for user in ("alice", "bob"):
            made = a.create_token(TokenCreate(name=f"desk-{user}", role="user", user=user))
            assert made.token
            tokens[user] = made.token
    env = {**script_env(), "GPUFLEET_SERVER": c.url, "GPUFLEET_TOKEN": tokens["alice"]}
    run, listing = lines(sh)
    said = run_line(run, tmp_path, env, timeout_s=180)
    assert "desktop studio: ready" in said, said
    (url,) = re.findall(r"^open:\s+(\S+)$", said, re.M)
    assert url.endswith(v.LOGIN)
    assert httpx.post(url, data={"token": tokens["bob"]}).status_code == 403
    login = httpx.post(url, data={"token": tokens["alice"]})
    assert login.status_code == 303, login.text
    base = url[: -len(v.LOGIN)]
    cookie = {"Cookie": f"{v.COOKIE}={tokens['alice']}"}
    page = httpx.get(base + login.headers["location"], headers=cookie)
    assert page.status_code == 200 and "noVNC" in page.text, (page.headers, page.text[:300])
    listed = run_line(listing, tmp_path, env)
    assert re.search(r"studio\s+alice\s+ready\s+node-0", listed), listed
    # a revoked token opens the desktop no more (the routes are applied again at once)
    with c.admin() as a:
        a.revoke_token("desk-alice")
    wait_for(
        "the revoked token is refused",
        lambda: plainhttp.get(base + "/vnc.html", headers=cookie).status_code == 403,
        30,
    )
