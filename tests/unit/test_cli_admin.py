"""``nodes``, ``drain``, ``resume``, ``queues``, ``token …``, ``audit`` against a fake API."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from test_cli_support import NOW, FakeApi, api, cli

__all__ = ["api"]  # the fixture, imported for pytest


def node(name: str, **kw: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": name,
        "state": "idle",
        "gpu_model": "H100-SXM",
        "gpus": 8,
        "gpus_free": 8.0,
        "cpu_cores": 112.0,
        "cpu_free": 112.0,
        "memory_gib": 2048.0,
        "memory_free_gib": 2048.0,
        "leaf": "leaf-1",
        "pod": "pod-a",
        "last_heartbeat": NOW,
    }
    out.update(kw)
    return out


def test_nodes_like_sinfo(api: FakeApi) -> None:
    api.on(
        "GET",
        "/nodes",
        [
            node("n02", state="drained", why="bad fan", gpus_free=8.0),
            node("n01", state="mixed", gpus_free=2.5, cpu_free=16.0, jobs=["17", "18"]),
        ],
    )
    r = cli("nodes")
    assert r.code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split()[:3] == ["NODE", "STATE", "GPU"]
    n01 = next(i for i, x in enumerate(lines) if x.startswith("n01"))
    n02 = next(i for i, x in enumerate(lines) if x.startswith("n02"))
    assert n01 < n02  # sorted by name
    assert "2.5/8" in lines[n01] and "16/112" in lines[n01] and "17,18" in lines[n01]
    assert "drained" in lines[n02] and "bad fan" in lines[n02]
    assert cli("nodes", "--json").json()[0]["name"] == "n02"


def test_no_nodes_says_how_to_add_one(api: FakeApi) -> None:
    api.on("GET", "/nodes", [])
    r = cli("nodes")
    assert r.code == 0 and r.stdout == "" and "gpufleet agent" in r.stderr


def test_drain_sends_the_reason_and_resume_undoes_it(api: FakeApi) -> None:
    api.on("POST", "/nodes/n01/drain", node("n01", state="drained", why="swap GPU 3"))
    api.on("POST", "/nodes/n01/resume", node("n01"))
    r = cli("drain", "n01", "--reason", "swap GPU 3")
    assert r.code == 0, r.stderr
    assert r.stdout == "node n01: drained (swap GPU 3)\n"
    assert api.body() == {"reason": "swap GPU 3", "deadline_s": None}
    r = cli("resume", "n01", "--json")
    assert r.code == 0 and r.json()["state"] == "idle"
    assert api.requests[-1].url.path == "/api/v1/nodes/n01/resume"


def test_drain_with_a_deadline_sends_it_in_seconds(api: FakeApi) -> None:
    api.on("POST", "/nodes/n01/drain", node("n01", state="drained", why="kernel update"))
    r = cli("drain", "n01", "--reason", "kernel update", "--deadline", "30m")
    assert r.code == 0, r.stderr
    assert api.body() == {"reason": "kernel update", "deadline_s": 1800.0}
    r = cli("drain", "n01", "--reason", "x", "--deadline", "soon")
    assert r.code == 2 and "--deadline soon" in r.stderr


def test_drain_needs_a_reason_and_names_unknown_nodes(api: FakeApi) -> None:
    r = cli("drain", "n01")
    assert r.code == 2 and "--reason" in r.stderr and api.requests == []
    api.on("POST", "/nodes/nx/drain", httpx.Response(404, json={"detail": "no node nx"}))
    r = cli("drain", "nx", "--reason", "x")
    assert r.code == 1
    assert r.stderr.splitlines() == [
        "error: no node nx (404)",
        "hint: check the node name (gpufleet nodes)",
    ]


def test_drain_as_a_user_is_refused_with_what_to_do(api: FakeApi) -> None:
    api.on("POST", "/nodes/n01/drain", httpx.Response(403, json={"detail": "admins only"}))
    r = cli("drain", "n01", "--reason", "x")
    assert r.code == 1 and r.stderr.startswith("error: admins only (403)\nhint: ")


def test_queues_show_quota_usage_and_fair_share(api: FakeApi) -> None:
    api.on(
        "GET",
        "/queues",
        [
            {
                "name": "vision",
                "cohort": "research",
                "weight": 1.0,
                "quota_gpus": 64.0,
                "used_gpus": 72.0,
                "borrowing": True,
                "pending": 3,
                "running": 9,
                "dominant_share": 0.5625,
                "fair_share_usage": 7200.0,
            },
            {
                "name": "adhoc",
                "cohort": "research",
                "weight": 0.5,
                "quota_gpus": None,
                "used_gpus": 0.0,
                "borrowing": False,
                "pending": 0,
                "running": 0,
                "dominant_share": 0.0,
                "fair_share_usage": 0.0,
            },
        ],
    )
    r = cli("queues")
    assert r.code == 0, r.stderr
    vision = next(x.split() for x in r.stdout.splitlines() if x.startswith("vision"))
    assert vision == ["vision", "research", "1", "64", "72", "yes", "3", "9", "56.2%", "2.0"]
    adhoc = next(x.split() for x in r.stdout.splitlines() if x.startswith("adhoc"))
    assert adhoc[2:4] == ["0.5", "-"]
    assert [q["name"] for q in cli("queues", "--json").json()] == ["vision", "adhoc"]


def test_token_create_prints_the_secret_once(api: FakeApi) -> None:
    api.on(
        "POST",
        "/tokens",
        {"name": "ana-laptop", "role": "user", "user": "ana", "token": "gft_secret"},
    )
    r = cli("token", "create", "ana-laptop", "--role", "user", "--user", "ana")
    assert r.code == 0, r.stderr
    assert r.stdout == "gft_secret\n"  # alone on stdout, so $(gpufleet token create …) works
    assert "shown only now" in r.stderr
    assert api.body() == {"name": "ana-laptop", "role": "user", "user": "ana", "node": None}


def test_token_create_for_an_agent_names_its_node(api: FakeApi) -> None:
    api.on("POST", "/tokens", lambda req: {**json.loads(req.content), "token": "t"})
    r = cli("token", "create", "n01-agent", "--role", "agent", "--node", "n01", "--json")
    assert r.code == 0, r.stderr
    assert r.json()["node"] == "n01" and r.json()["token"] == "t"


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["--role", "root"], "expected user, admin, agent or metrics"),
        (["--role", "agent"], "needs --node"),
        (["--role", "user"], "needs --user"),
        (["--role", "user", "--user", "ana", "--node", "n01"], "--node is for agent tokens"),
    ],
)
def test_token_create_refuses_bad_roles(api: FakeApi, args: list[str], why: str) -> None:
    r = cli("token", "create", "x", *args)
    assert r.code == 2 and why in r.stderr and api.requests == []


def test_token_create_of_an_existing_name(api: FakeApi) -> None:
    api.on("POST", "/tokens", httpx.Response(409, json={"detail": "token x exists"}))
    r = cli("token", "create", "x", "--role", "admin")
    assert r.code == 1 and "pick another name" in r.stderr


def test_token_list_and_revoke(api: FakeApi) -> None:
    api.on(
        "GET",
        "/tokens",
        [
            {"name": "ana-laptop", "role": "user", "user": "ana"},
            {"name": "n01-agent", "role": "agent", "node": "n01"},
        ],
    )
    api.on("DELETE", "/tokens/ana-laptop", httpx.Response(204))
    r = cli("token", "list")
    assert r.code == 0
    rows = [x.split() for x in r.stdout.splitlines()]
    assert ["ana-laptop", "user", "ana"] in rows and ["n01-agent", "agent", "n01"] in rows
    assert "token" not in r.stdout.lower().replace("tokens", "")  # never a secret column
    r = cli("token", "revoke", "ana-laptop")
    assert r.code == 0 and r.stdout == "token ana-laptop: revoked\n"
    assert api.requests[-1].method == "DELETE"


def test_audit(api: FakeApi) -> None:
    api.on(
        "GET",
        "/audit",
        [
            {
                "time": NOW,
                "actor": "admin",
                "action": "node.drain",
                "target": "n01",
                "detail": {"reason": "swap GPU 3", "jobs": 2},
            }
        ],
    )
    r = cli("audit", "-n", "5")
    assert r.code == 0, r.stderr
    assert api.requests[0].url.params["limit"] == "5"
    line = next(x for x in r.stdout.splitlines() if "node.drain" in x)
    assert "admin" in line and "n01" in line and "reason=swap GPU 3 jobs=2" in line
    assert cli("audit", "--json").json()[0]["action"] == "node.drain"


def test_server_errors_point_at_the_controller_log(api: FakeApi) -> None:
    api.on("GET", "/queues", httpx.Response(500, text="Internal Server Error"))
    r = cli("queues")
    assert r.code == 1
    assert r.stderr.splitlines() == [
        "error: Internal Server Error (500)",
        "hint: the server failed: see the controller's log",
    ]


def test_an_answer_that_is_not_the_api_is_reported_not_a_traceback(api: FakeApi) -> None:
    api.on("GET", "/nodes", [{"unexpected": True}])
    r = cli("nodes")
    assert r.code == 1 and r.stderr.startswith("error: unexpected answer from http://fleet.test")
    api.on("GET", "/nodes", httpx.Response(200, text="<html>proxy</html>"))
    r = cli("nodes")
    assert r.code == 1 and "unexpected answer" in r.stderr


def _queue_out(**kw: Any) -> dict[str, Any]:
    base = {"name": "desktops", "cohort": "", "weight": 1.0, "quota_gpus": None,
            "used_gpus": 0.0, "borrowing": False, "pending": 0, "running": 0,
            "dominant_share": 0.0, "fair_share_usage": 0.0}  # fmt: skip
    return {**base, **kw}


def test_queue_sets_encoder_packing_and_queues_shows_it(api: FakeApi) -> None:
    api.on("PUT", "/queues/desktops", _queue_out(pack_encoders=False))
    r = cli("queue", "desktops", "--pack-encoders", "false")
    assert r.code == 0, r.stderr
    assert api.body() == {"pack_encoders": False}
    assert r.stdout == "queue desktops: weight 1, video jobs kept apart from training\n"
    api.on("PUT", "/queues/desktops", _queue_out())
    assert cli("queue", "desktops", "--pack-encoders", "default").code == 0
    assert api.body() == {"pack_encoders": "default"}  # the queue's own word taken away
    rows = [_queue_out(pack_encoders=False), _queue_out(name="render", pack_encoders=True)]
    api.on("GET", "/queues", rows)
    lines = {x.split()[0]: x.split() for x in cli("queues").stdout.splitlines()[1:]}
    assert lines["desktops"][-1] == "apart" and lines["render"][-1] == "pack"


def test_queue_refuses_an_unknown_packing_and_nothing_to_change(api: FakeApi) -> None:
    r = cli("queue", "desktops", "--pack-encoders", "maybe")
    assert r.code == 2 and "must be true, false or default, got 'maybe'" in r.stderr
    r = cli("queue", "desktops")
    assert r.code == 2 and "nothing to change" in r.stderr
    r = cli("queue", "desktops", "--weight", "0", "--quota-gpus", "-1")
    assert r.code == 2 and "--weight: Input should be greater than 0" in r.stderr
    assert "--quota-gpus: Input should be greater than or equal to 0" in " ".join(r.stderr.split())
    assert api.requests == []


def test_queue_sets_its_ways_of_sharing_a_gpu(api: FakeApi) -> None:
    api.on("PUT", "/queues/desktops", _queue_out(gpu_sharing=["mps"]))
    r = cli("queue", "desktops", "--gpu-sharing", "mps")
    assert r.code == 0, r.stderr
    assert api.body() == {"gpu_sharing": ["mps"]}
    assert r.stdout.endswith(", GPU shares only by mps\n"), r.stdout
    api.on("PUT", "/queues/desktops", _queue_out())
    assert cli("queue", "desktops", "--gpu-sharing", "any").code == 0
    assert api.body() == {"gpu_sharing": []}  # the limit taken away
    api.on("GET", "/queues", [_queue_out(gpu_sharing=["timeslice", "mps"])])
    (row,) = [x.split() for x in cli("queues").stdout.splitlines() if x.startswith("desktops")]
    assert row[-1] == "timeslice,mps"
    n = len(api.requests)
    r = cli("queue", "desktops", "--gpu-sharing", "mig", "--weight", "0")
    assert r.code == 2 and len(api.requests) == n
    said = " ".join(r.stderr.replace("│", " ").split())
    assert '--gpu-sharing: must be a list of "timeslice" and "mps" (empty: any)' in said, said
    assert "--weight: Input should be greater than 0" in said
