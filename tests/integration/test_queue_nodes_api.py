"""A queue's node set over real HTTP (ADR 0066): PUT /queues/{name} validates ``nodes`` with
the body's other problems (422, every one at once), and a job no node of its queue's set could
ever hold is refused at submit in sbatch's words; one that fits there is kept."""

from __future__ import annotations

from test_api import SPEC, Api, refused, register  # test_api.py sits next to this file

from gpufleet.api import schemas as s


def test_a_queues_nodes_are_validated_with_the_bodys_other_problems(api: Api) -> None:
    admin = api.raw(api.token("admin"))
    r = admin.put("/queues/desktops", json={"nodes": ["pool=l40s"], "weight": 0})
    assert r.status_code == 422, r.text
    fields = {e["field"] for e in r.json()["errors"]}
    assert fields == {"body.nodes", "body.weight"}, r.text
    r = admin.put("/queues/desktops", json={"nodes": {"pool": 1}})  # strict: no number guessed
    assert r.status_code == 422 and "body.nodes.pool" in r.text, r.text
    assert "desktops" not in [q.name for q in api.admin.queues()]
    r = admin.put("/queues/desktops", json={"nodes": {"pool": "l40s"}})
    assert r.status_code == 200 and r.json()["nodes"] == {"pool": "l40s"}, r.text
    assert next(q for q in api.admin.queues() if q.name == "desktops").nodes == {"pool": "l40s"}
    r = admin.put("/queues/desktops", json={"nodes": {}})
    assert r.status_code == 200 and r.json()["nodes"] == {}, r.text


def test_a_job_no_node_of_its_queues_set_could_hold_is_refused_at_submit(api: Api) -> None:
    alice = api.user("alice")
    register(api.agent("big-0"), "big-0", 8, labels={"pool": "h100"})
    register(api.agent("small-0"), "small-0", 2, labels={"pool": "l40s"})
    api.admin.update_queue("desktops", s.QueueUpdate(nodes={"pool": "l40s"}))
    four = {**SPEC, "queue": "desktops", "gpus_per_worker": 4}
    msg = refused(422, lambda: alice.submit(four))
    assert "Requested node configuration is not available: " in msg, msg
    assert "on the 1 node(s) of queue desktops (pool=l40s); " in msg, msg
    (kept,) = alice.submit({**four, "gpus_per_worker": 2})
    (other,) = alice.submit({**four, "queue": "default"})  # another queue: every node
    api.admin.update_queue("desktops", s.QueueUpdate(nodes={"pool": "a10"}))
    msg = refused(422, lambda: alice.submit({**four, "gpus_per_worker": 1}))
    assert (
        "Requested node configuration is not available: queue desktops runs its jobs only on "
        "nodes labelled pool=a10 (its nodes); none of the cluster's 2 node(s) is"
    ) in msg, msg
    assert api.stored_ids() == sorted([kept, other])
