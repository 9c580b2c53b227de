"""Bad input never reaches a process or the store (issue 10): over real HTTP on 127.0.0.1, on
SQLite and PostgreSQL, each refusal is a 4xx in the one error shape (``ErrorOut``) naming its
field, nothing is stored, and the controller keeps answering. Bodies are sent as raw bytes:
a NUL, a lone surrogate or a NaN is what a hostile client sends, not what httpx would encode.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_api import serve as api_serve  # test_api.py sits next to this file

from gpufleet.api import schemas as s
from gpufleet.base.clock import ManualClock
from gpufleet.server.app import EXTRA_ERRORS
from gpufleet.server.store import Store

T0 = 1_700_000_000.0
SPEC: dict[str, Any] = {"name": "hello", "gpus_per_worker": 1, "command": ["echo", "hi"]}
LIMIT = 64 * 1024  # the test controller's --max-body-bytes


@dataclass
class Edge:
    http: httpx.Client  # the admin's
    store: Store

    def send(self, method: str, path: str, raw: bytes | None = None, **kw: Any) -> httpx.Response:
        headers = {"content-type": "application/json"} if raw is not None else {}
        return self.http.request(method, path, content=raw, headers=headers, **kw)

    def jobs(self) -> list[str]:
        return [j.id for j in self.store.list_jobs(limit=None)]


@contextlib.contextmanager
def serve(store: Store, data_dir: Path, **config: Any) -> Iterator[Edge]:
    with api_serve(store, data_dir, ManualClock(T0), max_body_bytes=LIMIT, **config) as api:
        token = api.admin.http.headers["authorization"].split()[1]
        yield Edge(api.raw(token), store)


@pytest.fixture
def edge(db_url: str, tmp_path: Path) -> Iterator[Edge]:
    store = Store.open(db_url)
    try:
        with serve(store, tmp_path / "controller", max_array_size=50) as e:
            yield e
    finally:
        store.close()


def body(**fields: Any) -> bytes:
    """JSON as a hostile client writes it: lone surrogates and NaN left as they are."""
    return json.dumps(fields, ensure_ascii=True, allow_nan=True).encode()


def refused(r: httpx.Response, status: int, *fields: str) -> s.ErrorOut:
    assert r.status_code == status, r.text
    err = s.ErrorOut.model_validate(r.json())  # the one error shape
    named = {e.field for e in err.errors}
    for f in fields:
        assert f in named, (f, err)
        assert f in err.detail
    return err


BAD_SUBMISSIONS = [
    ("NUL in a command", {"spec": {**SPEC, "command": ["echo", "a\x00b"]}}, "body.spec.command[1]"),
    ("NUL in an env value", {"spec": {**SPEC, "env": {"FOO": "a\x00"}}}, "body.spec.env.FOO"),
    ("lone surrogate in a name", {"spec": {**SPEC, "name": "\ud800"}}, "body.spec.name"),
    (
        "surrogate in an env key",
        {"spec": {**SPEC, "env": {"\udfff": "x"}}},
        "body.spec.env.\\udfff",
    ),
    ("env key with =", {"spec": {**SPEC, "env": {"A=B": "x"}}}, "body.spec.env.A=B"),
    ("cpus NaN", {"spec": {**SPEC, "cpus": float("nan")}}, "body.spec.cpus"),
    ("memory Infinity", {"spec": {**SPEC, "memory_gib": float("inf")}}, "body.spec.memory_gib"),
    ("cpus 1e308", {"spec": {**SPEC, "cpus": 1e308}}, "body.spec.cpus"),
    ("time limit 1e300", {"spec": {**SPEC, "time_limit_s": 1e300}}, "body.spec.time_limit_s"),
    ("memory_mib 2**70", {"spec": {**SPEC, "memory_mib": 2**70}}, "body.spec.memory_mib"),
    ("10k name", {"spec": {**SPEC, "name": "n" * 10_000}}, "body.spec.name"),
    # a name is printed on other people's terminals (an admin's squeue): no escape sequence
    ("ESC in a name", {"spec": {**SPEC, "name": "a\x1b]0;owned\x07"}}, "body.spec.name"),
    ("C1 control in a name", {"spec": {**SPEC, "name": "a\x9bb"}}, "body.spec.name"),
    ("ESC in an admin's user", {"spec": {**SPEC, "user": "u\x1b[2J"}}, "body.spec.user"),
    ("huge array", {"spec": SPEC, "array": "0-1000000000"}, "body.array"),
    ("array over the limit", {"spec": SPEC, "array": "0-50"}, "body.array"),
    ("NUL in an array", {"spec": SPEC, "array": "0-3\x00"}, "body.array"),
    (
        "NUL in a dependency",
        {"spec": SPEC, "depends_on": [{"type": "afterok", "job": "\x00"}]},
        "body.depends_on.0.job",
    ),
    (
        "NUL in the idempotency key",
        {"spec": SPEC, "idempotency_key": "k\x00"},
        "body.idempotency_key",
    ),
]


@pytest.mark.parametrize(
    ("fields", "where"), [b[1:] for b in BAD_SUBMISSIONS], ids=[b[0] for b in BAD_SUBMISSIONS]
)
def test_a_bad_submission_is_a_422_naming_the_field_and_stores_nothing(
    edge: Edge, fields: dict[str, Any], where: str
) -> None:
    refused(edge.send("POST", "/jobs", body(**fields)), 422, where)
    assert edge.jobs() == []
    r = edge.http.get("/jobs", params={"all": "true"})  # the listing still answers
    assert r.status_code == 200 and r.json() == []


def test_every_problem_of_a_body_is_reported_at_once(edge: Edge) -> None:
    spec = {**SPEC, "name": "a\x00", "cpus": float("nan"), "env": {"K": "\ud800", "OK": "1"}}
    err = refused(
        edge.send("POST", "/jobs", body(spec=spec)),
        422,
        "body.spec.name",
        "body.spec.cpus",
        "body.spec.env.K",
    )
    assert len(err.errors) == 3
    # the refused values are not echoed (a surrogate would not even encode)
    assert "\ud800" not in edge.send("POST", "/jobs", body(spec=spec)).text


BAD_REQUESTS = [
    ("accounting until before since", "GET", "/accounting?since=100&until=50", None, "query.until"),
    ("accounting since 1e400", "GET", "/accounting?since=1e400", None, "query.since"),
    ("accounting since nan", "GET", "/accounting?since=nan", None, "query.since"),
    (
        "fairness until before since",
        "GET",
        "/accounting/fairness?since=100&until=50",
        None,
        "query.until",
    ),
    (  # one cell per hour of the period: refused before it is made (found by fuzzing)
        "fairness over a period of 1e300 s",
        "GET",
        "/accounting/fairness?since=-1e300&until=50",
        None,
        "query.since",
    ),
    (
        "log offset over int64",
        "GET",
        "/jobs/1/logs?offset=9223372036854775808",
        None,
        "query.offset",
    ),
    ("log rank over the bound", "GET", "/jobs/1/logs?rank=99999999999", None, "query.rank"),
    ("NUL in a job id", "GET", "/jobs/a%00b", None, "path.job_id"),
    ("NUL in a listing filter", "GET", "/jobs?user=a%00", None, "query.user"),
    ("quota 1e306", "PUT", "/queues/q", body(quota_gpus=1e306), "body.quota_gpus"),
    ("weight NaN", "PUT", "/queues/q", body(weight=float("nan")), "body.weight"),
    ("weight as a string", "PUT", "/queues/q", body(weight="2"), "body.weight"),
    ("NUL in a queue name", "PUT", "/queues/a%00", body(weight=1), "path.name"),
    ("NUL in a cohort", "PUT", "/queues/q", body(cohort="c\x00"), "body.cohort"),
    ("NUL in a drain reason", "POST", "/nodes/n/drain", body(reason="\x00"), "body.reason"),
    ("NUL in a token name", "POST", "/tokens", body(name="t\x00", role="admin"), "body.name"),
    (
        "surrogate in a token user",
        "POST",
        "/tokens",
        body(name="t", role="user", user="\ud800"),
        "body.user",
    ),
    ("not UTF-8 at all", "POST", "/tokens", b'{"name": "\xff\xfe", "role": "admin"}', "body"),
]


@pytest.mark.parametrize(
    ("method", "path", "raw", "where"),
    [b[1:] for b in BAD_REQUESTS],
    ids=[b[0] for b in BAD_REQUESTS],
)
def test_a_bad_query_path_or_body_is_a_422_naming_it(
    edge: Edge, method: str, path: str, raw: bytes | None, where: str
) -> None:
    refused(edge.send(method, path, raw), 422, where)
    assert edge.store.queues() == [] or all(q.name != "q" for q in edge.store.queues())
    assert [t.name for t in edge.store.tokens()] == ["admin"]


ESC = "\x1b]0;owned\x07"  # an escape sequence: sets the title of the terminal that prints it


def test_stored_text_others_see_with_a_control_character_is_refused_and_nothing_stored(
    edge: Edge,
) -> None:
    # what an admin or a user sets here is printed on other people's terminals (a queue's
    # name in every refusal that names it, a drain reason in sinfo -R): every field at once
    refused(edge.send("PUT", "/queues/q%1B1", body(weight=1)), 422, "path.name")
    err = refused(
        edge.send("PUT", "/queues/q", body(cohort="c" + ESC, nodes={"k\x9b": "v", "k": "v\r"})),
        422,
        "body.cohort",
        "body.nodes.k",
    )
    assert len(err.errors) == 3  # and the key with a C1 control
    assert all(q.name != "q" for q in edge.store.queues())
    err = refused(
        edge.send("POST", "/tokens", body(name="t" + ESC, role="user", user="u\x7f")),
        422,
        "body.name",
        "body.user",
    )
    assert [t.name for t in edge.store.tokens()] == ["admin"]
    refused(edge.send("POST", "/nodes/n/drain", body(reason="r\n" + ESC)), 422, "body.reason")
    refused(
        edge.send("POST", "/nodes/n/commands", body(command="true", why="w" + ESC)),
        422,
        "body.why",
    )
    err = refused(
        edge.send(
            "POST",
            "/reservations",
            body(nodes="n" + ESC, start=T0, duration_s=60, users=["u" + ESC]),
        ),
        422,
        "body.nodes",
        "body.users.0",
    )
    assert edge.send("GET", "/reservations").json() == []
    r = edge.send("POST", "/jobs", body(spec=SPEC))
    assert r.status_code == 201, r.text
    job = r.json()["ids"][0]
    refused(edge.send("PATCH", f"/jobs/{job}", body(name="a" + ESC)), 422, "body.name")
    assert [j.spec.name for j in edge.store.list_jobs(limit=None)] == ["hello"]
    # text without control characters (tabs aside, one line) is still taken
    r = edge.send("PUT", "/queues/q", body(cohort="c", nodes={"k": "v"}))
    assert r.status_code == 200, r.text


def test_json_nested_too_deep_is_a_422_that_says_so_not_one_of_encoding(edge: Edge) -> None:
    deep = b"[" * 20_000 + b"]" * 20_000  # past Python's parser's recursion limit
    for path, raw in (
        ("/jobs", b'{"spec": ' + deep + b"}"),  # the submissions' own path (submit_fast.py)
        ("/tokens", deep),
        ("/sbatch", b'{"argv": [], "cwd": "/", "host": "h", "environ": {"A": ' + deep + b"}}"),
    ):
        err = refused(edge.send("POST", path, raw), 422, "body")
        assert "nested too deep" in err.detail and "UTF-8" not in err.detail, (path, err)
    assert edge.jobs() == []
    assert [t.name for t in edge.store.tokens()] == ["admin"]
    assert edge.send("POST", "/jobs", body(spec=SPEC)).status_code == 201  # still serving


def test_bad_agent_reports_are_refused_naming_the_field(edge: Edge) -> None:
    tok = edge.http.post("/tokens", json={"name": "a0", "role": "agent", "node": "n0"}).json()
    agent = {"authorization": f"Bearer {tok['token']}", "content-type": "application/json"}
    reg = {"node": "n0", "address": "127.0.0.1", "gpu_model": "", "gpus": [], "cpu_cores": 4}
    bad = [
        ("/agent/register", {**reg, "memory_gib": float("inf")}, "body.memory_gib"),
        ("/agent/register", {**reg, "memory_gib": 8, "labels": {"k": "\x00"}}, "body.labels.k"),
        ("/agent/n0/heartbeat", {"metrics": {"gpu": [float("nan")]}}, "body.metrics.gpu[0]"),
        ("/agent/n0/heartbeat", {"health": {"why": "\ud800"}}, "body.health.why"),
        (
            "/agent/n0/events",
            {"events": [{"kind": "exited", "job": "1", "attempt": 2**64, "rank": 0}]},
            "body.events.0.attempt",
        ),
    ]
    for path, fields, where in bad:
        refused(edge.http.post(path, content=body(**fields), headers=agent), 422, where)


def test_an_array_within_the_limit_is_accepted_and_the_limit_is_configurable(edge: Edge) -> None:
    r = edge.send("POST", "/jobs", body(spec=SPEC, array="0-49%5"))  # max_array_size=50
    assert r.status_code == 201, r.text
    assert len(r.json()["ids"]) == 50
    refused(edge.send("POST", "/jobs", body(spec=SPEC, array="0-40,50-60")), 422, "body.array")
    assert len(edge.jobs()) == 50


def test_a_body_over_the_limit_is_a_413_by_its_length(edge: Edge) -> None:
    big = body(spec={**SPEC, "env": {"X": "x" * LIMIT}})
    err = refused(edge.send("POST", "/jobs", big), 413, "body")
    assert str(LIMIT) in err.detail and "--max-body-bytes" in err.detail
    assert edge.jobs() == []
    assert edge.send("POST", "/jobs", body(spec=SPEC)).status_code == 201  # still serving


def test_a_chunked_body_over_the_limit_is_a_413_and_is_not_read_to_its_end(edge: Edge) -> None:
    sent = 0

    def chunks() -> Iterator[bytes]:  # no Content-Length: httpx sends it chunked
        nonlocal sent
        yield b'{"spec": {"name": "x", "env": {"X": "'
        for _ in range(10_000):  # 10,000 × 4 KiB = 40 MiB, if the server took it all
            sent += 4096
            yield b"x" * 4096
        yield b'"}}}'

    try:
        r = edge.http.post("/jobs", content=chunks(), headers={"content-type": "application/json"})
    except httpx.HTTPError:
        pass  # the server may close the connection while the client still writes: refused
    else:
        refused(r, 413, "body")
    assert sent < 10_000 * 4096  # the client was stopped well before the end
    assert edge.jobs() == []

    def small() -> Iterator[bytes]:  # a chunked body within the limit is read as it came
        data = body(spec=SPEC)
        for i in range(0, len(data), 7):
            yield data[i : i + 7]

    r = edge.http.post("/jobs", content=small(), headers={"content-type": "application/json"})
    assert r.status_code == 201, r.text


def test_every_operation_documents_its_errors_with_the_error_shape(edge: Edge) -> None:
    doc = edge.http.get("/openapi.json").json()
    assert "ErrorOut" in doc["components"]["schemas"]
    assert "HTTPValidationError" not in doc["components"]["schemas"]
    ref = {"$ref": "#/components/schemas/ErrorOut"}
    ops = 0
    for path, methods in doc["paths"].items():
        if not path.startswith("/api/v1"):
            continue
        for method, op in methods.items():
            ops += 1
            # every operation of the API takes a token: the bearer scheme says so
            assert op["security"] == [{"bearer": []}], (method, path)
            want = {"401", "403", "429", "503"}
            if op.get("parameters") or "requestBody" in op:
                want.add("422")  # and only then: nothing else is read
            if "{" in path:
                want.add("404")
            if "requestBody" in op:
                want.add("413")
            want |= {str(c) for c in EXTRA_ERRORS.get((method.upper(), path), ())}
            errors = {c for c in op["responses"] if c >= "400"}
            assert want <= errors <= want | {"409"}, (method, path, sorted(errors))
            for code in errors:
                assert op["responses"][code]["content"]["application/json"]["schema"] == ref
    assert ops > 20
    cancel = doc["paths"]["/api/v1/jobs/{job_id}/cancel"]["post"]["responses"]
    assert "409" in cancel
    assert doc["components"]["securitySchemes"]["bearer"] == {
        **doc["components"]["securitySchemes"]["bearer"],
        "type": "http",
        "scheme": "bearer",
    }
    # public: the health check (and this document, which is no operation); /metrics has its
    # own token (a metrics or an admin token), and says which
    assert "security" not in doc["paths"]["/healthz"]["get"]
    metrics = doc["paths"]["/metrics"]["get"]
    assert metrics["security"] == [{"metricsToken": []}]
    assert {"401", "403"} <= set(metrics["responses"])
    assert "--role metrics" in doc["components"]["securitySchemes"]["metricsToken"]["description"]


def test_operations_have_names_a_generated_client_can_use(edge: Edge) -> None:
    doc = edge.http.get("/openapi.json").json()
    ids = {
        f"{method.upper()} {path}": op["operationId"]
        for path, methods in doc["paths"].items()
        for method, op in methods.items()
    }
    assert len(set(ids.values())) == len(ids)  # unique
    assert all(re.fullmatch(r"[a-z]+(?:[A-Z][a-z]+)+", i) for i in ids.values()), ids
    assert ids["POST /api/v1/jobs"] == "submitJob"
    assert ids["GET /api/v1/jobs"] == "listJobs"
    assert ids["GET /api/v1/jobs/{job_id}"] == "getJob"
    assert ids["POST /api/v1/jobs/{job_id}/cancel"] == "cancelJob"
    assert ids["GET /api/v1/jobs/{job_id}/logs"] == "getJobLogs"
    assert ids["GET /api/v1/nodes"] == "listNodes"
    assert ids["POST /api/v1/nodes/{name}/drain"] == "drainNode"
    assert all(op.get("tags") for methods in doc["paths"].values() for op in methods.values())


def test_the_422_returned_is_the_422_documented(edge: Edge) -> None:
    doc = edge.http.get("/openapi.json").json()
    schemas = doc["components"]["schemas"]
    submit = doc["paths"]["/api/v1/jobs"]["post"]
    documented = submit["responses"]["422"]["content"]["application/json"]["schema"]
    assert documented == {"$ref": "#/components/schemas/ErrorOut"}
    assert set(schemas["ErrorOut"]["properties"]) == {"detail", "errors"}
    r = edge.send("POST", "/jobs", body(spec={**SPEC, "workers": 0}))
    err = refused(r, 422, "body.spec.workers")
    assert set(r.json()) == {"detail", "errors"}
    assert err.errors[0].message == "must be at least 1, got 0"
    # the job spec is typed: its schema is the model's, with its bounds and enums
    spec = schemas["JobSpecIn"]
    assert submit["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/JobSubmit"
    }
    assert schemas["JobSubmit"]["properties"]["spec"] == {"$ref": "#/components/schemas/JobSpecIn"}
    assert spec["properties"]["workers"]["anyOf"][0] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 4096,
    }
    assert schemas["TopologyLevel"]["enum"] == ["node", "leaf", "pod", "any"]


def test_errors_of_every_kind_share_the_shape(edge: Edge) -> None:
    refused(httpx.get(f"{edge.http.base_url}jobs"), 401)  # no token
    refused(edge.http.get("/jobs/999"), 404)
    refused(edge.http.get("/no/such/route"), 404)
    refused(edge.http.post("/tokens", json={"name": "admin", "role": "admin"}), 409)


def test_a_log_read_far_past_the_end_is_empty_not_an_error(tmp_path: Path) -> None:
    from gpufleet.server.logs import LogStore

    logs = LogStore(tmp_path)
    logs.append("7", 1, 0, "stdout", 0, "hello\n", final=True)
    assert logs.read("7", 1, 0, "stdout", 2**63 - 1) == ("", 2**63 - 1, True)  # was EINVAL
    assert logs.read("7", 1, 0, "stdout", 6) == ("", 6, True)
    assert logs.read("7", 1, 0, "stdout", 0) == ("hello\n", 6, True)


def test_an_unknown_query_parameter_is_refused_naming_the_nearest_known_one(edge: Edge) -> None:
    """A typo of a filter must not list everything as if no filter were asked for."""
    err = refused(edge.send("GET", "/jobs?stat=RUNNING&limit=5&bogus=1", None), 422,
                  "query.stat", "query.bogus")  # fmt: skip
    assert "did you mean 'state'?" in err.detail
    assert edge.http.get("/jobs", params={"state": "RUNNING", "limit": 5}).status_code == 200
    refused(edge.send("GET", "/queues?user=x", None), 422, "query.user")
    err = refused(edge.send("GET", "/audit?limt=5", None), 422, "query.limt")
    assert "did you mean 'limit'?" in err.detail
    assert [t.name for t in edge.store.tokens()] == ["admin"]
