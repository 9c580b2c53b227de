"""Issue 26: an operator's command run on a node through its agent, with real processes: an
admin's command runs once on the node, its output and exit code come back, its start and end
are in the node's history and the audit log; one past its time limit is killed; a user may
not run one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpufleet.client import ApiError
from gpufleet.ops.localcluster import LocalCluster

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("node-command")]


def test_an_admins_command_runs_on_the_node_and_its_end_is_kept_and_audited(
    new_cluster: Any, tmp_path: Path
) -> None:
    c: LocalCluster = new_cluster(agents=1)
    marker = tmp_path / "ran"
    with c.admin() as a:
        done = a.run_on_node(
            "node-0",
            f"echo ran >> {marker}; echo hello; echo oops >&2; exit 7",
            why="firmware check",
            wait_s=60,
        )
        assert (done.state, done.exit_code) == ("done", 7), done
        assert "hello" in done.output and "oops" in done.output
        assert done.requested_by == "admin" and done.why == "firmware check"
        assert marker.read_text() == "ran\n"  # once
        assert [x.id for x in a.node_commands("node-0")] == [done.id]
        slow = a.run_on_node("node-0", "sleep 30", timeout_s=0.5)
        ended = a.node_command(slow.id, wait_s=60)
        assert ended.state == "done" and "timed out" in ended.why, ended
        actions = [(e.action, e.target) for e in a.audit(200)]
        assert ("node.command", "node-0") in actions and ("node.command.end", "node-0") in actions
        events = a.http.get("/api/v1/nodes/node-0/history").json()["events"]
        whats = [(e["what"], e["why"]) for e in events]
        assert (
            "command",
            f"exec: echo ran >> {marker}; echo hello; echo oops >&2; exit 7",
        ) in whats
        assert ("command ended", f"exec {done.id} exit 7") in whats
    with c.user("alice") as u, pytest.raises(ApiError) as e:
        u.run_on_node("node-0", "id")
    assert e.value.status == 403
