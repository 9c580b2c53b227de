"""The agent's side of operators' commands (agent/nodecommand.py), with real processes: a
command runs once however often it is delivered, its output and exit code are kept until
delivered, one past its time limit is killed with its whole group, and what a dead agent was
running is reported with an unknown end by the next one (the restart it was asked for, done)."""

from __future__ import annotations

import json
from pathlib import Path

from gpufleet.agent.nodecommand import NodeCommands
from gpufleet.api.schemas import AgentCommand


def cmd(cid: str, command: str, kind: str = "exec", limit: float = 30.0) -> AgentCommand:
    return AgentCommand(
        kind=kind,  # type: ignore[arg-type]
        job=cid,
        attempt=0,
        rank=0,
        command=[command] if command else [],
        time_limit_s=limit,
    )


def test_a_command_runs_once_and_its_output_and_exit_code_are_kept_until_delivered(
    tmp_path: Path,
) -> None:
    nc = NodeCommands(tmp_path)
    counter = tmp_path / "ran"
    c = cmd("nc-1", f"echo ran >> {counter}; echo out; echo err >&2; exit 3")
    assert nc.take(c)
    assert not nc.take(c)  # redelivered while it runs
    nc.wait()
    assert not nc.take(c)  # redelivered after its end
    (res,) = nc.results()
    assert (res.id, res.exit_code, res.failed) == ("nc-1", 3, False)
    assert "out" in res.output and "err" in res.output
    nc.delivered("nc-1")
    assert nc.results() == []
    assert not nc.take(c)  # redelivered after the controller had it: a tombstone
    assert counter.read_text() == "ran\n"


def test_a_command_past_its_time_limit_is_killed_with_its_children(tmp_path: Path) -> None:
    nc = NodeCommands(tmp_path)
    child = tmp_path / "child-alive"
    script = f"(sleep 3; touch {child}) & echo started; sleep 60"
    assert nc.take(cmd("nc-2", script, limit=0.5))
    nc.wait(30)
    (res,) = nc.results()
    assert "timed out after 0.5 s" in res.why and res.exit_code != 0
    assert "started" in res.output
    nc2 = NodeCommands(tmp_path)  # a second look, later: the backgrounded child died too
    assert nc2.take(cmd("nc-3", "sleep 4"))
    nc2.wait(30)
    assert not child.exists()


def test_the_next_agent_reports_what_a_dead_one_ran_as_unknown_and_its_restart_as_done(
    tmp_path: Path,
) -> None:
    d = tmp_path / "commands"
    d.mkdir(mode=0o700)
    (d / "nc-a.run").write_text(json.dumps({"kind": "exec", "command": ["x"], "started": 5.0}))
    (d / "nc-b.run").write_text(json.dumps({"kind": "restart", "python": "/usr/bin/python3"}))
    nc = NodeCommands(tmp_path)
    assert nc.pending_restart() == "/usr/bin/python3"
    nc.recover()
    got = {r.id: r for r in nc.results()}
    assert got["nc-a"].failed and "its end is unknown" in got["nc-a"].why
    assert not got["nc-b"].failed and got["nc-b"].exit_code == 0
    assert "the agent restarted" in got["nc-b"].why
    assert not nc.take(cmd("nc-a", "true"))  # never run again
    assert nc.pending_restart() is None


def test_a_restart_to_an_install_that_cannot_start_the_agent_is_refused(tmp_path: Path) -> None:
    asked: list[str] = []
    nc = NodeCommands(tmp_path, on_restart=asked.append)
    assert nc.take(cmd("nc-r", "/bin/false", kind="restart"))
    nc.wait(60)
    (res,) = nc.results()
    assert res.exit_code == 1 and "does not start" in res.why
    assert asked == []  # this agent runs on
    ok = NodeCommands(tmp_path / "other", on_restart=asked.append)
    assert ok.take(cmd("nc-s", "", kind="restart"))  # its own interpreter
    ok.wait(60)
    assert len(asked) == 1 and ok.pending_restart() == asked[0]
