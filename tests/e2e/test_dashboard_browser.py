"""The dashboard in a real headless Chromium (Debian's ``chromium``, driven by Playwright through
its ``executable_path``) against a real controller with three simulated 8-GPU agents
(``LocalCluster``): two teams' jobs running, one finished job with a log, two pending jobs with
their Reasons (one over its queue's quota, one waiting for GPUs with an estimated start), and a
job whose name is markup; and a service of two replicas (a small HTTP server each, with HTTP
readiness and liveness probes) whose readiness the test turns off and on, and one of which it
makes fail its liveness probe. The test signs
in with tokens, visits each page, asserts on what the controller really holds, and saves a
screenshot of each page at 1280×800 (the paths are printed; copies go to
``$GPUFLEET_SCREENSHOTS`` when it is set).

Skipped, saying why, only when Playwright or Chromium is not installed (``.ci/run`` installs
Debian's chromium; Playwright is a dev extra)."""

from __future__ import annotations

import contextlib
import json
import re
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from livehelp import (
    dump_logs,
    dump_service,
    headless_chromium,
    keep_screenshots,
    wait_for,
    wait_state,
)

import realparts
from gpufleet.api.schemas import AccountingRow, TokenCreate
from gpufleet.client import Client
from gpufleet.ops.localcluster import LocalCluster

# Playwright and Debian's chromium: a test skips without them, saying so; CI=true: it fails
pytestmark = [pytest.mark.e2e, pytest.mark.requires("chromium")]

try:
    from playwright import sync_api
except ImportError:  # the "chromium" check of each test says so
    sync_api = None  # type: ignore[assignment]

CHROMIUM = realparts.CHROMIUM
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",  # a container's /dev/shm is small
]
PY = sys.executable
SLEEP = [PY, "-c", "import time; time.sleep(900)"]
HELLO = "hello from the dashboard test"
XSS_NAME = '<img src=x onerror="window.__xss=1">'
# a replica: HTTP on $PORT; /ready fails while the file "down-$PORT" exists next to this
# script, /alive while "dead-$PORT" does
REPLICA = """\
import http.server, os, pathlib
port = int(os.environ["PORT"])
here = pathlib.Path(__file__).parent
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        flag = {"/ready": "down", "/alive": "dead"}.get(self.path)
        self.send_response(503 if flag and (here / f"{flag}-{port}").exists() else 200)
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""
QUEUES = """\
queues:
  - {name: vision, weight: 1, quota: {gpus: 24}}
  - {name: nlp, weight: 1, quota: {gpus: 8}}
"""


def make_user(c: LocalCluster, name: str) -> tuple[Client, str, str]:
    """A user's client, its token, and the token's name (to revoke it)."""
    with c.admin() as admin:
        tok = admin.create_token(TokenCreate(name=f"dash-{name}", role="user", user=name))
    assert tok.token
    return Client(c.url, tok.token), tok.token, tok.name


@pytest.fixture(scope="module")
def env(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    base = tmp_path_factory.mktemp("dashboard")
    (base / "queues.yaml").write_text(QUEUES)
    c = LocalCluster(
        base / "cluster",
        agents=3,
        heartbeat_s=0.5,
        lease_s=1.5,
        node_grace_s=4.0,
        schedule_interval_s=0.5,
        queues_file=base / "queues.yaml",
    )
    failed = request.session.testsfailed
    users: dict[str, tuple[Client, str, str]] = {}
    try:
        c.start()
        users.update({n: make_user(c, n) for n in ("alice", "bob", "carol")})
        alice, bob, carol = (users[n][0] for n in ("alice", "bob", "carol"))
        jobs: dict[str, str] = {}
        (jobs["hello"],) = alice.submit(
            {"name": "hello", "queue": "vision", "command": [PY, "-c", f"print({HELLO!r})"]}
        )
        wait_state(alice, jobs["hello"], "SUCCEEDED", 60)
        # before the gangs: its CPU-only replicas need no wait behind the pending jobs
        (base / "replica.py").write_text(REPLICA)
        alice.create_service(
            {
                "name": "web",
                "replicas": 2,
                "replica": {
                    "queue": "vision",
                    "gpus_per_worker": 0,
                    # one node: the controller gives each replica the lowest port free on its
                    # node, and this cluster's nodes all share 127.0.0.1
                    "exclude": "node-[0,2]",
                    "command": [PY, str(base / "replica.py")],
                },
                "readiness": {"http": {"path": "/ready"}, "period_s": 0.5, "failure_threshold": 1},
                # a replica's Python may take seconds to listen on a loaded machine: its
                # liveness waits for that (refused connections before it listens would kill
                # it as dead, and each kill counts against its node)
                "liveness": {
                    "http": {"path": "/alive"},
                    "initial_delay_s": 5,
                    "period_s": 0.5,
                    "failure_threshold": 2,
                },
                # a replica that exits at once (its port held by another cluster on this
                # host) is replaced within seconds, not minutes
                "restart_backoff": {"base_s": 1.0, "max_s": 4.0},
            }
        )
        wait_for("2 replicas of web ready", lambda: alice.service("web").ready == 2, 90)
        (jobs["train"],) = alice.submit(
            {
                "name": "train-resnet",
                "queue": "vision",
                "workers": 2,
                "gpus_per_worker": 8,
                "command": SLEEP,
                "time_limit_s": 3600,
            }
        )
        wait_state(alice, jobs["train"], "RUNNING", 60)
        (jobs["bert"],) = bob.submit(
            {
                "name": "bert",
                "queue": "nlp",
                "gpus_per_worker": 4,
                "command": SLEEP,
                "time_limit_s": 1800,
            }
        )
        wait_state(bob, jobs["bert"], "RUNNING", 60)
        (jobs["over_quota"],) = bob.submit(
            {"name": "bert-large", "queue": "nlp", "gpus_per_worker": 8, "command": SLEEP}
        )
        (jobs["waits"],) = carol.submit(
            {
                "name": "vit-huge",
                "queue": "vision",
                "gpus_per_worker": 8,
                "command": SLEEP,
                "time_limit_s": 600,
            }
        )
        (jobs["xss"],) = alice.submit(
            {"name": XSS_NAME, "queue": "vision", "gpus_per_worker": 8, "command": SLEEP}
        )
        for who, key in ((bob, "over_quota"), (carol, "waits")):
            wait_for(f"a Reason for {key}", lambda w=who, k=key: w.job(jobs[k]).reason, 20)
        shots = base / "screenshots"
        shots.mkdir()
        yield {
            "cluster": c,
            "jobs": jobs,
            "users": users,
            "shots": shots,
            "base": base,
        }
    finally:
        if request.session.testsfailed != failed:
            dump_logs(c)
            dump_service(c, "web")
        c.stop()
        for u in users.values():
            u[0].close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with headless_chromium(CHROMIUM, ARGS) as b:
        yield b


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    ctx = browser.new_context(viewport={"width": 1280, "height": 800})
    pg = ctx.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.set_default_timeout(20_000)
    try:
        yield pg
    finally:
        ctx.close()
    assert not errors, f"the page raised: {errors}"


def shoot(pg: Any, env: dict[str, Any], name: str) -> None:
    path = env["shots"] / f"{name}.png"
    pg.screenshot(path=str(path))
    full = env["shots"] / f"{name}-full.png"
    pg.screenshot(path=str(full), full_page=True)
    print(f"screenshot: {path} (full page: {full})")
    keep_screenshots(path, full)


def accounting(admin: Client) -> dict[tuple[str, str], AccountingRow]:
    """GET /accounting over the last week (the dashboard's period), per queue and per user."""
    since = time.time() - 7 * 86400
    return {
        (by, r.key): r for by in ("queue", "user") for r in admin.accounting(since=since, by=by)
    }


def sign_in(pg: Any, url: str, token: str) -> None:
    pg.goto(url + "/")
    pg.locator("#login").wait_for(state="visible")
    pg.fill("#token", token)
    pg.click("#login button[type=submit]")
    pg.locator("#login").wait_for(state="hidden")


def test_static_files_are_served_with_a_content_security_policy(env: dict[str, Any]) -> None:
    url = env["cluster"].url
    r = httpx.get(url + "/")
    assert r.status_code == 200 and "text/html" in r.headers["content-type"]
    assert "script-src 'self'" in r.headers["content-security-policy"]
    assert '<script src="/dashboard/app.js"' in r.text
    assert (
        httpx.get(url + "/dashboard/app.js").headers["content-type"].startswith("text/javascript")
    )
    assert httpx.get(url + "/dashboard/style.css").status_code == 200
    assert httpx.get(url + "/dashboard/secret.py").status_code == 404
    assert httpx.get(url + "/api/v1/dashboard/cluster").status_code == 401


def test_admin_sees_every_page(page: Any, env: dict[str, Any]) -> None:
    c: LocalCluster = env["cluster"]
    jobs = env["jobs"]
    admin = c.admin()
    pg = page

    # sign-in: a wrong token is refused, saying why
    pg.goto(c.url + "/")
    pg.locator("#login").wait_for(state="visible")
    shoot(pg, env, "0-login")
    pg.fill("#token", "not-a-token")
    pg.click("#login button[type=submit]")
    sync_api.expect(pg.locator("#login-error")).to_contain_text("invalid or revoked token")
    pg.fill("#token", c.admin_token)
    pg.click("#login button[type=submit]")
    pg.locator("#login").wait_for(state="hidden")
    sync_api.expect(pg.locator("#who")).to_contain_text("admin")

    # cluster: both heat maps name every node and hold a cell per GPU
    for metric in ("util", "temp"):
        heat = pg.locator(f".heat[data-metric={metric}]")
        for n in ("node-0", "node-1", "node-2"):
            sync_api.expect(heat.locator(".rowhead", has_text=n)).to_be_visible()
        sync_api.expect(heat.locator(".cell")).to_have_count(24)
    # node-0 runs a rank of the 2 × 8 GPU gang: its GPUs report utilization from the load
    wait_for(
        "utilization in the heat map",
        lambda: pg.locator(".heat[data-metric=util] .cell.alloc.dark").count() >= 8,
        20,
    )
    sync_api.expect(pg.locator(".summary")).to_contain_text("20.0 / 24")  # 2 × 8 + 4 GPUs
    shoot(pg, env, "1-cluster")

    # queues: quota, usage, and each pending job's Reason as the scheduler wrote it; the
    # API's GPU-hours are read before the page asks for them and after it shows them
    before = accounting(admin)
    pg.click("#nav a[data-page=queues]")
    nlp = pg.locator("tr", has=pg.locator("td.strong", has_text="nlp"))
    sync_api.expect(nlp).to_contain_text("8.0 GPUs")
    vision = pg.locator("tr", has=pg.locator("td.strong", has_text="vision"))
    sync_api.expect(vision).to_contain_text("24.0 GPUs")
    for key in ("over_quota", "waits"):
        reason = admin.job(jobs[key]).reason
        assert reason is not None
        row = pg.locator("tr", has=pg.locator(f"a[href='#/jobs/{jobs[key]}']"))
        sync_api.expect(row).to_contain_text(reason.code)
        sync_api.expect(row).to_contain_text(reason.message[:60])
    waits = admin.job(jobs["waits"]).reason
    assert waits is not None and waits.estimated_start is not None  # behind the gang's limit
    row = pg.locator("tr", has=pg.locator(f"a[href='#/jobs/{jobs['waits']}']"))
    sync_api.expect(row.locator("td").last).to_contain_text(re.compile(r"^in \d+[smhd]"))
    # GPU-hours allocated against used, per queue and per user: the API's figures (what
    # gpufleet accounting prints) over the same week. The running jobs count to now, so the
    # API's answers before and after bound what the page shows (to its one decimal)
    hours = pg.locator(".gpu-hours")
    sync_api.expect(hours).to_contain_text("Used share")
    sync_api.expect(hours.locator("td.key", has_text="nlp")).to_be_visible()
    shown = hours.locator("tbody tr").evaluate_all(
        "rows => rows.map(r => [...r.cells].map(c => c.textContent))"
    )
    after = accounting(admin)
    assert {(r[1], r[0]) for r in shown} >= set(before), shown
    assert after[("queue", "vision")].gpu_hours > 0 and after[("user", "bob")].gpu_hours > 0
    for key, kind, n, allocated, used, _share in shown:
        now, then = after[(kind, key)], before.get((kind, key))
        assert (then.jobs if then else 0) <= int(n) <= now.jobs, (key, kind, n)
        for text, field in ((allocated, "gpu_hours"), (used, "used_gpu_hours")):
            low, high = (getattr(then, field) if then else 0.0), getattr(now, field)
            assert low - 0.051 <= float(text) <= high + 0.051, (key, kind, field, text, low, high)
    shoot(pg, env, "2-queues")

    # jobs: everyone's, filtered by user, queue and state; a markup name stays text
    pg.click("#nav a[data-page=jobs]")
    # the job's own row (the page being left may still be in the DOM for a moment)
    xss_row = pg.locator("tr", has=pg.locator(f"a[href='#/jobs/{jobs['xss']}']"))
    sync_api.expect(xss_row).to_contain_text(XSS_NAME)
    assert pg.evaluate("window.__xss") is None
    assert pg.locator("main img").count() == 0
    for key in ("train", "bert", "over_quota", "waits"):
        sync_api.expect(pg.locator(f"a[href='#/jobs/{jobs[key]}']")).to_be_visible()
    sync_api.expect(pg.locator(f"a[href='#/jobs/{jobs['hello']}']")).to_have_count(0)
    shoot(pg, env, "3-jobs")
    pg.fill("#f-user", "bob")
    pg.locator("#f-user").dispatch_event("change")
    sync_api.expect(pg.locator(f"a[href='#/jobs/{jobs['train']}']")).to_have_count(0)
    sync_api.expect(pg.locator(f"a[href='#/jobs/{jobs['bert']}']")).to_be_visible()
    pg.fill("#f-user", "")
    pg.locator("#f-user").dispatch_event("change")
    pg.select_option("#f-queue", "nlp")
    sync_api.expect(pg.locator(f"a[href='#/jobs/{jobs['waits']}']")).to_have_count(0)
    sync_api.expect(pg.locator(f"a[href='#/jobs/{jobs['over_quota']}']")).to_be_visible()
    pg.select_option("#f-queue", "")
    pg.select_option("#f-state", "SUCCEEDED")
    sync_api.expect(pg.locator(f"a[href='#/jobs/{jobs['hello']}']")).to_be_visible()
    sync_api.expect(pg.locator(f"a[href='#/jobs/{jobs['train']}']")).to_have_count(0)

    # a job: placement, events and its log
    pg.click(f"a[href='#/jobs/{jobs['hello']}']")
    sync_api.expect(pg.locator("#log")).to_contain_text(HELLO)
    done = admin.job(jobs["hello"])
    sync_api.expect(pg.locator(f"main a[href='#/nodes/{done.placement[0].node}']")).to_be_visible()
    sync_api.expect(pg.locator("main")).to_contain_text("SUCCEEDED")
    pg.goto(f"{c.url}/#/jobs/{jobs['train']}")
    train = admin.job(jobs["train"])
    for p in train.placement:
        sync_api.expect(pg.locator(f"main a[href='#/nodes/{p.node}']")).to_be_visible()
    sync_api.expect(pg.locator("main")).to_contain_text("RUNNING")
    shoot(pg, env, "4-job")
    pg.goto(f"{c.url}/#/jobs/{jobs['waits']}")
    sync_api.expect(pg.locator(".reason-box")).to_contain_text(admin.job(jobs["waits"]).reason.code)
    shoot(pg, env, "5-job-pending")

    # nodes: GPU metrics over time as SVG lines, the node's GPUs and events
    node = train.placement[0].node
    pg.goto(f"{c.url}/#/nodes/{node}")
    sync_api.expect(pg.locator(".node-list a.active")).to_contain_text(node)
    wait_for(
        "the utilization chart drawing 8 GPUs' lines",
        lambda: pg.locator("figure.chart-box").first.locator("polyline").count() >= 8,
        20,
    )
    sync_api.expect(pg.locator("figure.chart-box")).to_have_count(4)
    sync_api.expect(pg.locator(f"main a[href='#/jobs/{jobs['train']}']").first).to_be_visible()
    shoot(pg, env, "6-node")
    admin.close()


def test_a_user_token_sees_only_its_own_jobs_and_a_revoked_one_signs_out(
    page: Any, env: dict[str, Any]
) -> None:
    c: LocalCluster = env["cluster"]
    jobs = env["jobs"]
    pg = page
    _, bob_token, bob_token_name = env["users"]["bob"]
    sign_in(pg, c.url, bob_token)
    sync_api.expect(pg.locator("#who")).to_contain_text("bob · user")

    pg.click("#nav a[data-page=jobs]")
    sync_api.expect(pg.locator(f"a[href='#/jobs/{jobs['bert']}']")).to_be_visible()
    sync_api.expect(pg.locator(f"a[href='#/jobs/{jobs['over_quota']}']")).to_be_visible()
    sync_api.expect(pg.locator("#f-user")).to_be_disabled()
    sync_api.expect(pg.locator("#f-user")).to_have_value("bob")
    for key in ("train", "waits", "xss"):
        sync_api.expect(pg.locator(f"a[href='#/jobs/{jobs[key]}']")).to_have_count(0)
    sync_api.expect(pg.locator("main")).not_to_contain_text("alice")
    shoot(pg, env, "7-jobs-as-bob")

    pg.click("#nav a[data-page=queues]")  # the pending list: bob's own only
    sync_api.expect(pg.locator(f"a[href='#/jobs/{jobs['over_quota']}']")).to_be_visible()
    sync_api.expect(pg.locator(f"a[href='#/jobs/{jobs['waits']}']")).to_have_count(0)

    pg.click("#nav a[data-page=cluster]")  # the heat map names bob's jobs, not alice's
    sync_api.expect(pg.locator(".heat").first).to_be_visible()
    shown = pg.eval_on_selector_all(
        ".heat .cell[data-jobs]", "cs => cs.flatMap(c => c.dataset.jobs.split(' '))"
    )
    assert set(shown) == {jobs["bert"]}, shown  # alice's gang holds 16 GPUs, unnamed here

    # services: alice's is not in bob's list; by its address, the API's 403 (as for a job)
    pg.click("#nav a[data-page=services]")
    sync_api.expect(pg.locator("main")).to_contain_text("no services")
    sync_api.expect(pg.locator("a[href='#/services/web']")).to_have_count(0)
    pg.goto(f"{c.url}/#/services/web")
    sync_api.expect(pg.locator("main .banner")).to_contain_text("service web belongs to alice")
    sync_api.expect(pg.locator("main")).not_to_contain_text("Replicas")

    # another user's job, asked for by its address: the API's 403, shown
    pg.goto(f"{c.url}/#/jobs/{jobs['train']}")
    sync_api.expect(pg.locator("main .banner")).to_contain_text("belongs to alice")

    # the token revoked while the page is open: the next poll shows the sign-in again
    with c.admin() as admin:
        admin.revoke_token(bob_token_name)
    pg.click("#nav a[data-page=cluster]")
    pg.locator("#login").wait_for(state="visible")
    sync_api.expect(pg.locator("#login-error")).to_contain_text("invalid or revoked")
    shoot(pg, env, "8-signed-out")


def replica_row(pg: Any, job_id: str) -> Any:
    return pg.locator("tr", has=pg.locator(f"a[href='#/jobs/{job_id}']"))


def test_services_show_their_replicas_probes_and_request_rate(
    page: Any, env: dict[str, Any]
) -> None:
    c: LocalCluster = env["cluster"]
    pg = page
    admin = c.admin()
    # the gateway's second counter sample gives the first rate (0 req/s: nothing was sent)
    web = wait_for(
        "a request rate", lambda: (s := admin.service("web")).request_rate is not None and s, 30
    )
    sign_in(pg, c.url, c.admin_token)

    # the list: name, owner, ready/desired, the measured rate
    pg.click("#nav a[data-page=services]")
    row = pg.locator("tr", has=pg.locator("a[href='#/services/web']"))
    sync_api.expect(row).to_contain_text("alice")
    sync_api.expect(row).to_contain_text("2/2")
    sync_api.expect(row).to_contain_text(f"{web.request_rate:.1f}")
    sync_api.expect(row).to_contain_text("ready")
    shoot(pg, env, "9-services")

    # the service's page: each replica's job, node, port, state and probe states
    pg.click("a[href='#/services/web']")
    sync_api.expect(pg.locator("main h1, main h2").first).to_contain_text("web")
    # web.1 and web.2, or their successors where one exited (another cluster on this host
    # may hold the port it was given)
    assert len(web.replicas) == 2 and all(r.ready for r in web.replicas)
    sync_api.expect(pg.locator("main tr", has=pg.locator("a[href^='#/jobs/web.']"))).to_have_count(
        2
    )
    for r in web.replicas:
        assert r.node and r.port
        tds = replica_row(pg, r.job_id).locator("td")
        sync_api.expect(tds.nth(2)).to_have_text("RUNNING")
        sync_api.expect(tds.nth(3)).to_have_text(r.node)
        sync_api.expect(tds.nth(4)).to_have_text(str(r.port))
        sync_api.expect(tds.nth(5)).to_have_text("ready")
        sync_api.expect(tds.nth(6)).to_have_text("passing")
        sync_api.expect(tds.nth(7)).to_have_text("passing")
    sync_api.expect(pg.locator("main")).to_contain_text("2 ready, 2 live, 2 desired")
    assert web.endpoint is not None and web.endpoint.token is None
    sync_api.expect(pg.locator("main dl.facts")).to_contain_text(web.endpoint.url)
    shoot(pg, env, "10-service")

    # one replica's readiness fails: out of the traffic, and the page shows it after a refresh
    one, other = web.replicas
    down = env["base"] / f"down-{one.port}"
    down.touch()
    try:
        wait_for(f"{one.job_id} not ready", lambda: admin.service("web").ready == 1, 30)
        pg.reload()
        tds = replica_row(pg, one.job_id).locator("td")
        sync_api.expect(tds.nth(5)).to_have_text("not ready")
        sync_api.expect(tds.nth(6)).to_have_text("failing")
        sync_api.expect(tds.nth(7)).to_have_text("passing")  # alive: not restarted
        sync_api.expect(replica_row(pg, other.job_id).locator("td").nth(5)).to_have_text("ready")
        sync_api.expect(pg.locator("main")).to_contain_text("1 ready, 2 live, 2 desired")
        # a replica failing its probe: the service is degraded (it was shown "starting")
        sync_api.expect(pg.locator("dl.facts .badge").first).to_have_text("degraded (1/2 ready)")
        sync_api.expect(tds.nth(6).locator(".badge.warn")).to_have_text("failing")
        shoot(pg, env, "11-service-degraded")
        pg.click("a[href='#/services']")
        sync_api.expect(row).to_contain_text("1/2")
        sync_api.expect(row.locator(".badge")).to_have_text("degraded (1/2 ready)")
    finally:
        down.unlink()
    wait_for(f"{one.job_id} ready again", lambda: admin.service("web").ready == 2, 30)
    pg.reload()
    sync_api.expect(row).to_contain_text("2/2")

    # the other one fails its liveness probe: the page names it failed, says why, and shows
    # its replacement once that one is ready
    dead = env["base"] / f"dead-{other.port}"
    dead.touch()
    try:
        failed = wait_for(
            "a 'replica failed' event",
            lambda: [
                e
                for e in admin.service("web").events or []
                if e.what == "replica failed" and e.why.startswith(f"{other.job_id} ")
            ],
            30,
        )
    finally:
        dead.unlink()  # its replacement may be given the same port
    assert failed[-1].why.startswith(f"{other.job_id} on {other.node}: liveness"), failed
    pg.goto(f"{c.url}/#/services/web")
    sync_api.expect(pg.locator("main")).to_contain_text(failed[-1].why)
    after = wait_for(
        "a replacement ready",
        lambda: len((s := admin.service("web")).replicas) == 2 and s.ready == 2 and s,
        60,
    )
    (new,) = [r for r in after.replicas if r.job_id not in (one.job_id, other.job_id)]
    pg.reload()
    sync_api.expect(replica_row(pg, other.job_id)).to_have_count(0)
    tds = replica_row(pg, new.job_id).locator("td")
    sync_api.expect(tds.nth(2)).to_have_text("RUNNING")
    sync_api.expect(tds.nth(5)).to_have_text("ready")
    shoot(pg, env, "12-service-replaced")
    pg.click("a[href='#/services']")

    # traffic through the service's endpoint: the list shows the rate the gateway measured
    book = json.loads((c.data_dir / "controller" / "gateway" / "endpoints.json").read_text())
    ep = book["web"]
    stop = threading.Event()

    def send() -> None:
        # a connection per request, any answer: another cluster's haproxy on this host may
        # listen on the same port (haproxy binds with SO_REUSEPORT), and the kernel spreads
        # the connections over them; ours counts those it gets
        # one client without keep-alive: a new connection per request, and no new client
        # (its SSL context) per request, which on a loaded machine cost more than the request
        auth = {"Authorization": f"Bearer {ep['token']}"}
        limits = httpx.Limits(max_keepalive_connections=0)
        with httpx.Client(headers=auth, timeout=5, limits=limits) as http:
            while not stop.wait(0.02):  # about 40 requests/s
                with contextlib.suppress(httpx.HTTPError):
                    http.get(f"http://127.0.0.1:{ep['port']}/")

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    try:
        wait_for("a rate above 0", lambda: (admin.service("web").request_rate or 0) > 1, 30)
        pg.reload()
        sync_api.expect(row.locator("td").nth(5)).to_have_text(re.compile(r"^[1-9][0-9]*\.[0-9]$"))
        shoot(pg, env, "13-services-traffic")
    finally:
        stop.set()
        sender.join(10)
    admin.close()
