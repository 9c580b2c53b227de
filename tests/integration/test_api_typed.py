"""Typed responses everywhere in the OpenAPI schema (issue 14): every 2xx answer of every route
has a schema that says what is in it, and what the routes typed last (the dashboard's JSON and
``/healthz``) really return validates against their models, on a live controller with a node
that reports some GPUs and not others, a running job, node events and a Prometheus."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel
from test_api import SPEC, T0, register, serve, started  # test_api.py sits next to this file

from gpufleet.api import dashboard, schemas
from gpufleet.base.clock import ManualClock
from gpufleet.client.http import AgentClient
from gpufleet.server.app import create_app
from gpufleet.server.config import ServerConfig
from gpufleet.server.store import Store

# every response model the API names, by its name in components/schemas
MODELS: dict[str, type[BaseModel]] = {
    name: cls
    for module in (schemas, dashboard)
    for name, cls in vars(module).items()
    if isinstance(cls, type) and issubclass(cls, BaseModel)
}


def untyped(doc: dict[str, Any], schema: Any, where: str) -> list[str]:
    """Why ``schema`` (one 2xx body) does not say what is in it: missing, ``{}``, or an object
    with neither properties nor typed additionalProperties (a bare dict); arrays by their
    items."""
    if not isinstance(schema, dict) or not schema:
        return [f"{where}: no schema"]
    ref = schema.get("$ref")
    if ref:
        name = ref.removeprefix("#/components/schemas/")
        target = doc["components"]["schemas"].get(name)
        return untyped(doc, target, f"{where} → {name}") if target is not None else [where]
    if schema.get("type") == "array":
        return untyped(doc, schema.get("items"), f"{where}[]")
    if schema.get("type") == "object" or "additionalProperties" in schema:
        extra = schema.get("additionalProperties")
        if not schema.get("properties") and (extra in (None, True, {})):
            return [f"{where}: an object of anything"]
    if not ({"type", "anyOf", "oneOf", "allOf", "properties"} & set(schema)):
        return [f"{where}: no type"]
    return []


def test_every_2xx_response_of_the_api_is_typed(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'g.db'}")
    try:
        app = create_app(ServerConfig(data_dir=tmp_path / "c"), store=store)
        doc = app.openapi()
    finally:
        store.close()
    problems, seen = [], 0
    for path, methods in doc["paths"].items():
        for method, op in methods.items():
            where = f"{method.upper()} {path} ({op['operationId']})"
            ok = {c: r for c, r in op["responses"].items() if c.startswith("2")}
            if not ok:
                problems.append(f"{where}: no 2xx response")
            for code, resp in ok.items():
                seen += 1
                content = resp.get("content")
                if code == "204":
                    if content:
                        problems.append(f"{where} 204: has a body")
                    continue
                if not content:
                    problems.append(f"{where} {code}: no content")
                    continue
                for media, body in content.items():
                    problems += untyped(doc, body.get("schema"), f"{where} {code} {media}")
            # the dashboard's routes and /healthz name a model (the rest did already)
            if path.startswith("/api/v1/dashboard") or path in (
                "/healthz",
                "/api/v1/nodes/{name}/history",
            ):
                schema = ok["200"]["content"]["application/json"]["schema"]
                assert schema["$ref"].removeprefix("#/components/schemas/") in MODELS, where
    assert problems == []
    assert seen > 20


def test_the_walk_finds_untyped_answers() -> None:
    # the check itself can fail: a bare dict, {}, and an array of bare dicts
    doc: dict[str, Any] = {"components": {"schemas": {"Loose": {"type": "object"}}}}
    assert untyped(doc, {}, "a") == ["a: no schema"]
    assert untyped(doc, {"type": "object", "additionalProperties": True}, "b")
    assert untyped(doc, {"type": "array", "items": {"$ref": "#/components/schemas/Loose"}}, "c")
    assert not untyped(doc, {"type": "object", "additionalProperties": {"type": "integer"}}, "d")


# ----- the real answers against their models ----------------------------------------------

ACTIVE = "2026-12-01T10:00:00.123456789Z"


class Prometheus(BaseHTTPRequestHandler):
    """Answers ``/api/v1/alerts`` with one firing alert about node-0's GPU 0."""

    def do_GET(self) -> None:
        alert = {
            "labels": {"alertname": "GpuHot", "severity": "critical", "Hostname": "node-0"}
            | {"gpu": "0"},
            "annotations": {"summary": "<hot>"},
            "state": "firing",
            "activeAt": ACTIVE,
        }
        body = json.dumps({"status": "success", "data": {"alerts": [alert]}}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def prometheus() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Prometheus)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def checked(r: httpx.Response, model: type[BaseModel]) -> Any:
    """The body, after checking it against ``model`` as it was sent (strict: no extra field)."""
    assert r.status_code == 200, r.text
    model.model_validate_json(r.content)
    return r.json()


def test_dashboard_and_health_answers_validate_against_their_models(
    db_url: str, tmp_path: Path, prometheus: str
) -> None:
    store = Store.open(db_url)
    try:
        clock = ManualClock(T0)
        with serve(store, tmp_path / "c", clock, prometheus_url=prometheus) as api:
            agent: AgentClient = api.agent("node-0")
            register(agent, "node-0", gpus=2)
            # GPU 0 reports its values, GPU 1 nothing
            gpu0 = {"DCGM_FI_DEV_GPU_UTIL": 55, "DCGM_FI_DEV_GPU_TEMP": 61.5}
            metrics = {"gpus": [{"labels": {"gpu": "0"}, "values": gpu0}]}
            agent.heartbeat("node-0", schemas.Heartbeat(metrics=metrics))
            (job,) = api.user("alice").submit(SPEC)
            (cmd,) = agent.commands("node-0", wait_s=5)
            started(agent, "node-0", [cmd])
            api.admin.drain("node-0", "maintenance")
            clock.advance(30)
            agent.heartbeat("node-0", schemas.Heartbeat(metrics=metrics))

            admin = api.raw(api.token("admin"))
            alice = api.raw(api.token("user", user="alice"))

            me = checked(alice.get("/dashboard/me"), dashboard.DashboardMe)
            assert (me["role"], me["user"], me["time"]) == ("user", "alice", T0 + 30)

            view = checked(admin.get("/dashboard/cluster"), dashboard.ClusterView)
            (node,) = view["nodes"]
            g0, g1 = node["gpus"]
            assert (g0["util"], g0["temp"], g0["reporting"]) == (55, 61.5, True)
            assert g0["jobs"] == [job] and g0["alloc"] == 1.0
            # a value the GPU did not report is left out, not sent as null (the page's
            # script tells the two apart)
            assert "util" not in g1 and "power" not in g0 and g1["reporting"] is False
            assert (view["running_jobs"], view["states"]) == (1, {node["state"]: 1})

            hist = checked(admin.get("/nodes/node-0/history"), dashboard.NodeHistoryOut)
            assert hist["node"] == "node-0" and len(hist["times"]) == 2
            assert hist["series"]["DCGM_FI_DEV_GPU_UTIL"] == {"0": [55.0, 55.0]}
            assert [e["what"] for e in hist["events"]][-1:] == ["drained"]
            assert hist["events"][-1]["why"] == "maintenance"
            since = checked(
                admin.get("/nodes/node-0/history", params={"since": T0 + 1}),
                dashboard.NodeHistoryOut,
            )
            assert since["times"] == [T0 + 30]

            for who, client in (("admin", admin), ("alice", alice)):
                alerts = checked(client.get("/dashboard/alerts"), dashboard.AlertsOut)
                (a,) = alerts["alerts"]
                assert (a["name"], a["node"], a["summary"]) == ("GpuHot", "node-0", "<hot>")
                assert alerts["configured"] and alerts["error"] is None and alerts["more"] == 0
                assert ("url" in alerts) == (who == "admin")  # admins only, else absent

            health = checked(httpx.get(api.url + "/healthz"), dashboard.HealthOut)
            assert (health["ok"], health["nodes"], health["jobs"]) == (True, 1, 1)
            assert health["store"]["ok"] is True and health["store"]["why"] is None
    finally:
        store.close()


def test_alerts_without_a_prometheus_validate(db_url: str, tmp_path: Path) -> None:
    store = Store.open(db_url)
    try:
        with serve(store, tmp_path / "c", ManualClock(T0)) as api:
            admin = api.raw(api.token("admin"))
            alerts = checked(admin.get("/dashboard/alerts"), dashboard.AlertsOut)
            assert alerts == {"configured": False, "alerts": [], "error": None}
            view = checked(admin.get("/dashboard/cluster"), dashboard.ClusterView)
            assert view["nodes"] == [] and view["gpus_total"] == 0
    finally:
        store.close()
