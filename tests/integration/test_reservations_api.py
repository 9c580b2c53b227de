"""Advance reservations (maintenance windows) over real HTTP on SQLite and PostgreSQL
(test_api.py's server and scripted agents): admins create, list, show and remove them, audited;
users may list them, not make them; a job whose time limit would cross a window does not start
on its nodes and says so; a job of the reservation's users runs in it with ``reservation``; an
unknown reservation is refused at submit as an unknown partition is; a restarted controller
keeps them."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_api import T0, Api, refused, register, serve, wait_for

from gpufleet.base.clock import ManualClock
from gpufleet.server.store import Store

H = 3600.0
SPEC: dict[str, Any] = {"name": "long", "gpus_per_worker": 8, "command": ["true"]}


def window(**kw: Any) -> dict[str, Any]:
    body = {"nodes": "node-1", "start": T0 + 2 * H, "duration_s": 4 * H, "maint": True}
    return {**body, **kw}


def launched(agent: Any, node: str) -> list[str]:
    return [c.job for c in agent.commands(node, wait_s=0.2) if c.kind == "launch"]


@pytest.mark.both_stores
def test_admins_make_list_show_and_remove_reservations_audited(api: Api) -> None:
    for node in ("node-0", "node-1"):
        register(api.agent(node), node)
    r = api.admin.create_reservation(window(name="maint", users=["root"]))
    assert (r.name, r.nodes, r.state, r.maint, r.users) == (
        "maint",
        "node-1",
        "INACTIVE",
        True,
        ["root"],
    )
    assert (r.start, r.end, r.created_by) == (T0 + 2 * H, T0 + 6 * H, "admin")
    alice = api.user("alice")
    assert [x.name for x in alice.reservations()] == ["maint"]  # everyone may see them
    assert "admin" in refused(403, lambda: alice.create_reservation(window(name="mine")))
    assert "admin" in refused(403, lambda: alice.delete_reservation("maint"))
    # a window of the same node at the same time, a node that does not exist, a name taken
    assert "already reserved by maint" in refused(
        409, lambda: api.admin.create_reservation(window(name="x", start=T0 + 3 * H))
    )
    assert "no node node-9" in refused(
        422, lambda: api.admin.create_reservation(window(name="x", nodes="node-[1,9]"))
    )
    assert "exists already" in refused(
        409, lambda: api.admin.create_reservation(window(name="maint", start=T0 + 9 * H))
    )
    default = api.admin.create_reservation(window(start=T0 + 10 * H))
    assert default.name == "admin_1"  # Slurm's way: the creator's name and a number
    assert api.admin.reservation("maint").node_count == 1
    api.admin.delete_reservation("admin_1")
    assert "no reservation admin_1" in refused(404, lambda: api.admin.reservation("admin_1"))
    seen = [(e.action, e.target) for e in api.admin.audit(limit=1000)]
    assert ("reservation.create", "maint") in seen and ("reservation.delete", "admin_1") in seen


def test_a_job_crossing_the_window_keeps_off_its_nodes_and_says_why(api: Api) -> None:
    a1 = api.agent("node-1")
    register(a1, "node-1")
    api.admin.create_reservation(window(name="maint", users=["root"]))
    alice = api.user("alice")
    (long,) = alice.submit({**SPEC, "time_limit_s": 8 * H})
    (short,) = alice.submit({**SPEC, "name": "short", "time_limit_s": H})

    def reason() -> Any:
        j = alice.job(long)
        return j.reason if j.reason is not None and j.reason.code != "Priority" else None

    why = wait_for("the long job's reason", reason)
    assert why.code == "ReservedForMaintenance"
    assert why.message.startswith("node-1 reserved for maintenance from ")
    assert why.message.endswith("(in 2h 00m); your 8h 00m time limit would cross it")
    assert why.estimated_start == T0 + 6 * H
    # the short one ends before the window: backfill starts it there
    assert wait_for("the short job's launch", lambda: launched(a1, "node-1")) == [short]


def test_submit_refuses_an_unknown_reservation_and_one_not_for_its_user(api: Api) -> None:
    register(api.agent("node-1"), "node-1")
    api.admin.create_reservation(window(name="maint", users=["root"]))
    alice = api.user("alice")
    msg = refused(422, lambda: alice.submit({**SPEC, "reservation": "maitn"}))
    assert "spec.reservation: Requested reservation is invalid: maitn" in msg
    assert "did you mean 'maint'?" in msg
    msg = refused(422, lambda: alice.submit({**SPEC, "reservation": "maint"}))
    assert "Access denied to requested reservation maint" in msg
    assert api.stored_ids() == []  # nothing half-stored


def test_a_reservations_user_runs_in_it_once_it_opens(api: Api) -> None:
    a1 = api.agent("node-1")
    register(a1, "node-1")
    api.admin.create_reservation(window(name="maint", users=["root"], start=T0 + 60))
    root = api.user("root")
    (job,) = root.submit({**SPEC, "name": "fix", "reservation": "maint", "time_limit_s": H})
    why = wait_for("its reason", lambda: root.job(job).reason)
    assert why.code == "Reservation" and "waiting for reservation maint" in why.message
    assert root.job(job).spec["reservation"] == "maint"
    (n1,) = api.admin.nodes()
    assert (n1.reservation, n1.maint) == ("", False)  # not open yet
    api.clock.advance(61)  # the window opens: the next pass starts it on the reserved node
    assert wait_for("its launch", lambda: launched(a1, "node-1")) == [job]
    (n1,) = api.admin.nodes()
    assert (n1.reservation, n1.maint) == ("maint", True)


def test_a_restarted_controller_keeps_its_reservations(db_url: str, tmp_path: Path) -> None:
    store = Store.open(db_url)
    clock = ManualClock(T0)
    try:
        with serve(store, tmp_path / "c", clock) as a:
            register(a.agent("node-1"), "node-1")
            a.admin.create_reservation(window(name="maint"))
        with serve(store, tmp_path / "c", clock) as b:
            assert [r.name for r in b.admin.reservations()] == ["maint"]
            b._n = 100  # its tokens' names after the first server's
            register(b.agent("node-1"), "node-1")
            alice = b.user("alice")
            (job,) = alice.submit(SPEC)  # no time limit: it would cross the window
            why = wait_for("its reason", lambda: alice.job(job).reason)
            assert why.code == "ReservedForMaintenance"
    finally:
        store.close()


def readme_block(title: str) -> list[str]:
    """The commands of the README section ``title``'s first ``sh`` block, one per line."""
    text = (Path(__file__).parents[2] / "README.md").read_text()
    section = text.split(f"### {title}\n", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def test_the_readmes_maintenance_commands_work_as_written(api: Api, tmp_path: Path) -> None:
    for i in range(3, 7):
        register(api.agent(f"gpu-{i:02d}"), f"gpu-{i:02d}")
    token = tmp_path / "admin.token"
    token.write_text(api.admin.http.headers["authorization"].split()[1])
    token.chmod(0o600)
    env = {**os.environ, "GPUFLEET_SERVER": api.url, "GPUFLEET_TOKEN_FILE": str(token)}
    env.pop("GPUFLEET_TOKEN", None)
    outputs = []
    for line in readme_block("Maintenance"):
        words = shlex.split(line.split("  #")[0])
        assert words[0] == "gpufleet", line
        done = subprocess.run(
            [sys.executable, "-m", "gpufleet.cli", *words[1:]],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, (line, done.stdout, done.stderr)
        outputs.append(done.stdout)
    assert outputs[0].startswith("reservation maint: gpu-[03-06] from ")
    assert "MAINT" in outputs[1] and "gpu-[03-06]" in outputs[1]
    assert "ops" in outputs[2]
    assert outputs[3].startswith("Submitted job ")
    assert outputs[4] == "reservation maint removed\n"
    assert api.admin.reservations() == []
