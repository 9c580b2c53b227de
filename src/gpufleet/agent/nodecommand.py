"""Operator commands on the node (api/nodecommands.py): an admin's shell command, gpufleet
validate's on-node layers, or the agent's own restart (an upgrade), each at most once.

A command is known by its id; its record lives in the data directory (``commands/``) from the
moment it is taken, so that a redelivered command (the outbox delivers at least once, and a
controller that restarted sends the unfinished ones again) never runs twice, even across an
agent restart. The command runs as the agent's user (root on a real node), in a session of its
own, its output (stdout and stderr together) in a file of which the last ``MAX_OUTPUT`` bytes
are reported, killed (its whole group) at its time limit. Its result is kept until the
controller has it (``results``, ``delivered``); a delivered one leaves a tombstone, pruned past
``KEEP``. A command that ran when its agent died has an unknown end: the next agent reports it
failed, except the restart that was asked for, which it reports done."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from gpufleet.api.nodecommands import MAX_OUTPUT, NodeCommandResult
from gpufleet.api.schemas import AgentCommand
from gpufleet.base.secretfile import private_dir
from gpufleet.client.errors import ApiError
from gpufleet.client.http import AgentClient

log = logging.getLogger(__name__)

KINDS = ("exec", "validate", "restart")
KEEP = 1000  # tombstones of delivered commands (redeliveries come within seconds)
_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_KILL_GRACE_S = 5.0
VALIDATOR = "gpufleet.ops.validate.onnode"  # gpufleet validate's layers, run on this node


class NodeCommands:
    def __init__(
        self,
        data_dir: Path,
        *,
        python: str = sys.executable,
        on_restart: Callable[[str], None] | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.dir = private_dir(Path(data_dir) / "commands")
        self.python = python
        # the agent's hand-over for a restart (run_agent sets it): exit, leave the tasks
        self.on_restart = on_restart
        self.wall = wall
        self._lock = threading.Lock()
        self._threads: dict[str, threading.Thread] = {}

    def running(self) -> bool:
        """Whether a command runs now (its result is written when it ends)."""
        return any(t.is_alive() for t in list(self._threads.values()))

    def _path(self, cid: str, ext: str) -> Path:
        return self.dir / f"{cid}.{ext}"

    def take(self, cmd: AgentCommand) -> bool:
        """Start ``cmd`` unless it was taken before (True: started now)."""
        cid = cmd.job
        if cmd.kind not in KINDS or not _ID.match(cid):
            log.error("refusing a node command with the id %r", cid)
            return False
        with self._lock:
            if any(self._path(cid, x).exists() for x in ("run", "json", "delivered")):
                return False  # a redelivery: it runs, or ran, once
            record = {"kind": cmd.kind, "command": cmd.command, "started": self.wall()}
            _write(self._path(cid, "run"), record)
        log.warning("node command %s (%s): %s", cid, cmd.kind, " ".join(cmd.command)[:200])
        target = self._restart if cmd.kind == "restart" else self._run
        t = threading.Thread(target=target, args=(cmd,), name=f"node-command-{cid}", daemon=True)
        self._threads[cid] = t
        t.start()
        return True

    def argv(self, cmd: AgentCommand) -> list[str]:
        if cmd.kind == "validate":
            return [self.python, "-m", VALIDATOR, *cmd.command]
        return ["/bin/sh", "-c", " ".join(cmd.command)]

    def _run(self, cmd: AgentCommand) -> None:
        started = self.wall()
        out = self._path(cmd.job, "out")
        limit = cmd.time_limit_s or 600.0
        why, failed, code = "", False, -1
        try:
            with out.open("wb") as f:
                proc = subprocess.Popen(
                    self.argv(cmd),
                    stdin=subprocess.DEVNULL,
                    stdout=f,
                    stderr=subprocess.STDOUT,
                    cwd="/",
                    env=_env(),
                    start_new_session=True,
                )
            try:
                code = proc.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                code = proc.returncode if proc.returncode is not None else -signal.SIGKILL
                why = f"timed out after {limit:g} s: killed"
        except OSError as e:
            failed, why = True, f"could not run it: {e}"
        self._finish(cmd.job, code, why, started, failed=failed)

    def _restart(self, cmd: AgentCommand) -> None:
        """An upgrade: the new install's interpreter (or ours) must start the agent's package
        before this agent hands over; one that cannot is refused, and this agent runs on."""
        python = (cmd.command[0] if cmd.command else "") or self.python
        started = self.wall()
        try:
            check = subprocess.run(
                [python, "-c", "import gpufleet.agent.main"],
                capture_output=True,
                timeout=60,
                stdin=subprocess.DEVNULL,
                env=_env(),
            )
            ok, err = check.returncode == 0, check.stderr.decode(errors="replace")[-2000:]
        except (OSError, subprocess.TimeoutExpired) as e:
            ok, err = False, str(e)
        if not ok:
            self._finish(cmd.job, 1, f"the new install does not start: {err}", started)
            return
        _write(
            self._path(cmd.job, "run"), {"kind": "restart", "python": python, "started": started}
        )
        if self.on_restart is None:
            self._finish(cmd.job, 1, "this agent cannot restart itself", started, failed=True)
            return
        self.on_restart(python)

    def _finish(
        self, cid: str, code: int, why: str, started: float, *, failed: bool = False
    ) -> None:
        output = _tail(self._path(cid, "out"))
        res = NodeCommandResult(
            id=cid,
            exit_code=code,
            output=output,
            why=why,
            started=started,
            ended=self.wall(),
            failed=failed,
        )
        with self._lock:
            _write(self._path(cid, "json"), res.model_dump())
            self._path(cid, "run").unlink(missing_ok=True)
            self._path(cid, "out").unlink(missing_ok=True)
        log.warning("node command %s ended: exit %d %s", cid, code, why)

    def recover(self) -> None:
        """At start: what a previous agent was running ended unseen (its end unknown), except
        the restart it was asked for, which is this start."""
        for run in sorted(self.dir.glob("*.run")):
            cid = run.stem
            try:
                rec = json.loads(run.read_text())
            except (OSError, ValueError):
                rec = {}
            started = float(rec.get("started", 0.0))
            if rec.get("kind") == "restart" and rec.get("python"):
                why = f"the agent restarted: pid {os.getpid()}, {rec['python']}"
                self._finish(cid, 0, why, started)
            else:
                self._finish(
                    cid,
                    -1,
                    "the agent restarted while it ran: its end is unknown",
                    started,
                    failed=True,
                )

    def pending_restart(self) -> str | None:
        """The interpreter a restart asked for and checked (None: none asked)."""
        for run in self.dir.glob("*.run"):
            with contextlib.suppress(OSError, ValueError):
                rec = json.loads(run.read_text())
                if rec.get("kind") == "restart" and rec.get("python"):
                    return str(rec["python"])
        return None

    def results(self) -> list[NodeCommandResult]:
        """The ended commands the controller does not have yet."""
        out = []
        for p in sorted(self.dir.glob("*.json")):
            with contextlib.suppress(OSError, ValueError):
                out.append(NodeCommandResult.model_validate_json(p.read_text()))
        return out

    def ship(self, client: AgentClient, node: str, retryable: tuple[int, ...]) -> None:
        """Send the results the controller lacks; raises when one cannot go now. One refused
        for good (a 4xx not in ``retryable``: a command it no longer knows) is dropped."""
        for res in self.results():
            try:
                client.command_result(node, res)
            except ApiError as e:
                if not 400 <= e.status < 500 or e.status in retryable:
                    raise
                log.error("controller refused the result of node command %s: %s", res.id, e)
            self.delivered(res.id)

    def delivered(self, cid: str) -> None:
        with self._lock:
            src = self._path(cid, "json")
            if src.exists():
                os.replace(src, self._path(cid, "delivered"))
            tombs = sorted(self.dir.glob("*.delivered"), key=lambda p: p.stat().st_mtime)
            for p in tombs[:-KEEP] if len(tombs) > KEEP else ():
                p.unlink(missing_ok=True)

    def wait(self, timeout_s: float = 10.0) -> None:
        """Tests: the commands started so far have ended (or ``timeout_s`` passed)."""
        end = time.monotonic() + timeout_s
        for t in list(self._threads.values()):
            t.join(max(0.0, end - time.monotonic()))


def _env() -> dict[str, str]:
    """The agent's environment, without any credential of its own."""
    return {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_TOKEN")}


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    for sig, wait in ((signal.SIGTERM, _KILL_GRACE_S), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _tail(path: Path) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - MAX_OUTPUT))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def _write(path: Path, doc: object) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)
