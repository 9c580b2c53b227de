"""Job secrets over real HTTP on SQLite and PostgreSQL (test_api.py's server and agents): made,
listed without values and removed by whom the scopes allow; checked at submit; opened only in
the poll answer that hands a launch to its agent (the outbox keeps the reference), audited by
job; a secret deleted before its launch fails the job with a Reason that says so."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from test_api import T0, Api, refused, register, wait_for

from gpufleet.api import schemas as s
from gpufleet.api.secrets import SecretCreate
from gpufleet.server.store.schema import secrets as secrets_table

VALUE = "s3cr3t-Ünïcode-value-4711"
SPEC: dict[str, Any] = {"name": "uses", "gpus_per_worker": 1, "command": ["true"]}


def mk(name: str, value: str = VALUE, **kw: Any) -> SecretCreate:
    return SecretCreate(name=name, value=value, **kw)


def test_create_list_replace_and_remove_never_show_a_value(api: Api) -> None:
    alice = api.user("alice")
    out = alice.create_secret(mk("api-key"))
    assert (out.name, out.scope, out.owner, out.created_by) == (
        "api-key",
        "user",
        "alice",
        out.created_by,
    )
    assert out.created_time == out.updated_time == T0 and out.last_used_time is None
    assert "409" in refused(409, lambda: alice.create_secret(mk("api-key")))
    api.clock.advance(5)
    again = alice.create_secret(mk("api-key", "new-value", replace=True))
    assert (again.created_time, again.updated_time) == (T0, T0 + 5)
    listed = alice.secrets()
    assert [(x.name, x.scope, x.owner) for x in listed] == [("api-key", "user", "alice")]
    raw = api.raw(alice.http.headers["authorization"].split()[1]).get("/secrets").text
    assert VALUE not in raw and "new-value" not in raw and "value" not in raw
    alice.delete_secret("api-key")
    assert alice.secrets() == []
    assert "does not exist" in refused(404, lambda: alice.delete_secret("api-key"))
    audit = api.admin.audit(limit=1000)
    assert [e.action for e in audit if e.action.startswith("secret.")] == [
        "secret.delete",
        "secret.create",
        "secret.create",
    ]
    assert not any(VALUE in str(e.detail) or "new-value" in str(e.detail) for e in audit)


def test_scopes_and_who_may_make_or_see_them(api: Api) -> None:
    alice, bob = api.user("alice"), api.user("bob")
    for req in (mk("shared", scope="queue", queue="default"), mk("shared", scope="cluster")):
        assert "admin token" in refused(403, lambda r=req: alice.create_secret(r))
    assert "not bob's" in refused(403, lambda: alice.create_secret(mk("k", user="bob")))
    assert "whose secret" in refused(422, lambda: api.admin.create_secret(mk("k")))
    assert "needs its queue" in refused(
        422, lambda: api.admin.create_secret(mk("k", scope="queue"))
    )
    api.admin.create_secret(mk("q-key", scope="queue", queue="default"))
    api.admin.create_secret(mk("c-key", scope="cluster"))
    api.admin.create_secret(mk("a-key", user="alice"))
    bob.create_secret(mk("b-key"))
    seen = {(x.scope, x.owner, x.name) for x in alice.secrets()}
    assert seen == {
        ("queue", "default", "q-key"),
        ("cluster", "", "c-key"),
        ("user", "alice", "a-key"),
    }
    assert len(api.admin.secrets()) == 4
    assert {x.name for x in api.admin.secrets(scope="user")} == {"a-key", "b-key"}
    refused(403, lambda: alice.delete_secret("c-key", scope="cluster"))
    refused(403, lambda: alice.delete_secret("b-key", user="bob"))
    refused(404, lambda: alice.delete_secret("b-key"))  # her own namespace: none of that name
    api.admin.delete_secret("b-key", user="bob")
    assert bob.secrets() == [x for x in bob.secrets() if x.scope != "user"]


def test_bad_names_and_values_are_refused_without_quoting_the_value(api: Api) -> None:
    http = api.raw(api.user("alice").http.headers["authorization"].split()[1])
    for body, field in (
        ({"name": "../x", "value": "v"}, "body.name"),
        ({"name": "k" * 129, "value": "v"}, "body.name"),
        ({"name": "k", "value": ""}, "body.value"),
        ({"name": "k", "value": "bad\x00" + VALUE}, "body.value"),
        ({"name": "k", "value": "x" * (64 * 1024 + 1)}, "body.value"),
        ({"name": "k", "value": VALUE, "scope": "node"}, "body.scope"),
    ):
        r = http.post("/secrets", json=body)
        assert r.status_code == 422, (body, r.text)
        assert field in [e["field"] for e in r.json()["errors"]], r.text
        assert VALUE not in r.text


def test_a_job_is_refused_at_submit_naming_each_secret_it_may_not_use(api: Api) -> None:
    alice, bob = api.user("alice"), api.user("bob")
    alice.create_secret(mk("mine"))
    refs = [{"name": "mine", "env": "MINE"}, {"name": "nope", "file": "nope"}]
    msg = refused(422, lambda: bob.submit({**SPEC, "secrets": refs}))
    assert "secrets[0].name" in msg and "'mine'" in msg and "user bob's" in msg
    assert "secrets[1].name" in msg and "'nope'" in msg
    assert "user alice" not in msg  # nothing said of alice's namespace
    assert "secrets[1]" in refused(422, lambda: alice.submit({**SPEC, "secrets": refs}))
    assert api.stored_ids() == []
    (job,) = alice.submit({**SPEC, "secrets": refs[:1]})
    spec = api.admin.job(job).spec
    assert spec["secrets"] == [{"name": "mine", "scope": "user", "env": "MINE", "file": ""}]
    # a queue's secret: for the jobs of that queue only; the cluster's: for every job
    api.admin.create_secret(mk("q-key", scope="queue", queue="default"))
    api.admin.update_queue("other", s.QueueUpdate(weight=1))  # only admins make queues
    api.admin.create_secret(mk("o-key", scope="queue", queue="other"))
    api.admin.create_secret(mk("mine", scope="cluster"))  # bob has no "mine" of his own
    (job,) = bob.submit(
        {**SPEC, "secrets": [{"name": "q-key", "env": "Q"}, {"name": "mine", "env": "M"}]}
    )
    assert [(r["name"], r["scope"]) for r in api.admin.job(job).spec["secrets"]] == [
        ("q-key", "queue"),
        ("mine", "cluster"),
    ]
    msg = refused(
        422,
        lambda: bob.submit({**SPEC, "secrets": [{"name": "o-key", "scope": "queue", "env": "O"}]}),
    )
    assert "'o-key'" in msg and "queue default's" in msg
    (job,) = bob.submit({**SPEC, "queue": "other", "secrets": [{"name": "o-key", "env": "O"}]})
    assert api.admin.job(job).spec["secrets"][0]["scope"] == "queue"


@pytest.mark.both_stores  # through every layer down to the database
def test_a_launch_carries_the_values_only_in_the_answer_that_hands_it_over(
    api: Api, db_url: str
) -> None:
    alice = api.user("alice")
    alice.create_secret(mk("env-key"))
    api.admin.create_secret(mk("cert", "-----BEGIN-----\nline\n", scope="cluster"))
    agent = api.agent("node-0")
    register(agent, "node-0")
    refs = [{"name": "env-key", "env": "API_KEY"}, {"name": "cert", "file": "tls.pem"}]
    (job,) = alice.submit({**SPEC, "secrets": refs})
    svc = api.app.state.service
    wait_for("queued", lambda: svc.outbox.pending("node-0") == 1)
    (queued,) = svc.outbox._queues["node-0"]
    assert VALUE not in repr(queued) and all(t.value == "" for t in queued.secrets)
    (cmd,) = agent.commands("node-0", wait_s=5)
    got = {(t.scope, t.owner, t.name, t.env, t.file): t.value for t in cmd.secrets}
    assert got == {
        ("user", "alice", "env-key", "API_KEY", ""): VALUE,
        ("cluster", "", "cert", "", "tls.pem"): "-----BEGIN-----\nline\n",
    }
    assert VALUE not in repr(cmd)  # a log line of the command shows no value
    # the use is audited by job and secret, with no value; last use recorded
    uses = [e for e in api.admin.audit(limit=1000) if e.action == "secret.use"]
    assert {(e.actor, e.target, e.detail["job"]) for e in uses} == {
        ("job:alice", "secret:user:alice:env-key", job),
        ("job:alice", "secret:cluster:cert", job),
    }
    assert not any(VALUE in str(e.detail) for e in api.admin.audit(limit=1000))
    assert all(x.last_used_time is not None for x in api.admin.secrets())
    # the job as any API shows it, and the store's rows: never the value
    for text in (
        api.raw(alice.http.headers["authorization"].split()[1]).get(f"/jobs/{job}").text,
        api.raw(alice.http.headers["authorization"].split()[1]).get("/jobs").text,
    ):
        assert VALUE not in text
    with api.store.engine.connect() as c:
        rows = c.execute(sa.select(secrets_table)).all()
        everything = repr(rows) + repr(c.execute(sa.text("SELECT * FROM jobs")).all())
        everything += repr(c.execute(sa.text("SELECT * FROM audit")).all())
    assert (
        len(rows) == 2
        and VALUE not in everything
        and VALUE.encode() not in b"".join(bytes(r.ciphertext) for r in rows)
    )
    if db_url.startswith("sqlite"):
        db = Path(db_url.removeprefix("sqlite:///"))
        blob = b"".join(p.read_bytes() for p in db.parent.glob(db.name + "*"))
        assert VALUE.encode() not in blob and b"BEGIN" not in blob


def test_a_secret_deleted_before_the_launch_fails_the_job_saying_so(api: Api) -> None:
    alice = api.user("alice")
    alice.create_secret(mk("gone-soon"))
    (job,) = alice.submit({**SPEC, "secrets": [{"name": "gone-soon", "env": "K"}]})
    alice.delete_secret("gone-soon")
    agent = api.agent("node-0")
    register(agent, "node-0")
    svc = api.app.state.service
    wait_for("queued", lambda: svc.outbox.pending("node-0") == 1)
    assert agent.commands("node-0", wait_s=0) == []  # never handed over …
    j = wait_for("failed", lambda: (x := api.admin.job(job)).state == "FAILED" and x)
    why = " ".join(e.why for e in j.events or [])
    assert "secret 'gone-soon' (user alice's) no longer exists" in why, why
    assert svc.outbox.pending("node-0") == 0  # … nor queued again


@pytest.mark.both_stores  # through every layer down to the database
def test_a_tampered_row_fails_the_launch_and_opens_nothing(api: Api) -> None:
    alice = api.user("alice")
    alice.create_secret(mk("k"))
    alice.create_secret(mk("other", "other-value"))
    with api.store.engine.begin() as c:  # the row of "other" moved onto "k"
        t = secrets_table.c
        other = c.execute(sa.select(t.nonce, t.ciphertext).where(t.name == "other")).one()
        c.execute(
            sa.update(secrets_table)
            .where(t.name == "k")
            .values(nonce=other.nonce, ciphertext=other.ciphertext)
        )
    (job,) = alice.submit({**SPEC, "secrets": [{"name": "k", "env": "K"}]})
    agent = api.agent("node-0")
    register(agent, "node-0")
    svc = api.app.state.service
    wait_for("queued", lambda: svc.outbox.pending("node-0") == 1)
    assert agent.commands("node-0", wait_s=0) == []
    j = wait_for("failed", lambda: (x := api.admin.job(job)).state == "FAILED" and x)
    why = " ".join(e.why for e in j.events or [])
    assert "cannot be opened" in why and "altered" in why and "other-value" not in why
