"""The heal loop's steps on the node (ADR 0042): the controller orders them (``AgentCommand``
of kind "heal"), this carries them out one at a time on a thread of its own and reports each
(``AgentEvent`` of kind "heal") through the agent's event queue, which delivers at least once.

- **remediate**: once the node's tasks have ended, the GPU backend resets every GPU (simulated
  GPUs clear their injected faults; NVML nodes run ``nvidia-smi --gpu-reset``, see
  ``nvml/reset.py``). A site's command as the remedy is not this step's: the controller runs
  it as an operator's node command (``agent/nodecommand.py``).
- **burn-in**: the XIDs seen before the remediation are forgotten (what they asked for is
  done); every GPU must be found again; the GPUs are held at full load for the burn-in's
  length (the simulated ones heat as under a job) while the agent's own health checks watch
  them (an XID, a double-bit ECC error, heat, NVLink down fail it), and the device layer of
  ``gpufleet validate`` runs beside it (``python -m gpufleet.ops.burnin``: nvidia-smi, DCGM,
  PyTorch's matmul and copy stress on every GPU; skipped where the tools are absent, as
  validate skips them), with its network test against a healthy peer: this node's half here,
  the peer's half a node command the controller starts there."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from gpufleet.api.schemas import AgentCommand, AgentEvent
from gpufleet.core.heal import net_seconds

if TYPE_CHECKING:
    from gpufleet.agent.agent import Agent

log = logging.getLogger(__name__)

TASKS_END_S = 60.0  # a remediation waits this long for the node's last tasks to end
SAMPLE_S = 1.0  # the health checks' interval under stress
PROBE_SLACK_S = 300.0  # the device probe's time beyond the stress (DCGM, PyTorch's start)
MARKER = "GPUFLEET-PROBE "  # the result line of ops/probes/common.py


class StepFailed(Exception):
    """The step did not pass; the message says why, for the node's history."""


class HealWorker:
    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agent-heal")
        # (epoch, round, step, peer) taken: the outbox delivers at least once
        self._seen: set[tuple[int, int, str, str]] = set()
        self._stress = False
        self._steps = 0  # ordered and not yet answered
        self._lock = threading.Lock()

    def order(self, cmd: AgentCommand) -> None:
        key = (cmd.epoch, cmd.attempt, cmd.step, cmd.peer)
        with self._lock:
            if key in self._seen:
                return  # a redelivery: it runs, or ran, once
            self._seen.add(key)
            self._steps += 1
        log.warning("heal: %s (round %d) ordered", cmd.step, cmd.attempt)
        self._pool.submit(self._run, cmd)
        self.agent._wake_tick.set()

    def idle(self) -> bool:
        return self._steps == 0

    def load(self, base: Mapping[int, float]) -> Mapping[int, float]:
        """The GPUs' load: every GPU at full load while the burn-in stresses them."""
        if not self._stress:
            return base
        return {g.index: 1.0 for g in self.agent.gpus}

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    # ----- one step -----------------------------------------------------------------------

    def _run(self, cmd: AgentCommand) -> None:
        try:
            if cmd.step == "remediate":
                ok, detail = True, self._remediate(cmd)
            else:
                ok, detail = True, self._burn_in(cmd)
        except StepFailed as e:
            ok, detail = False, str(e)
        except Exception as e:  # nothing may leave the step unanswered
            log.exception("heal: %s failed unexpectedly", cmd.step)
            ok, detail = False, f"the agent failed: {type(e).__name__}: {e}"
        finally:
            self._stress = False
            with self._lock:
                self._steps -= 1
        log.warning(
            "heal: %s (round %d) %s: %s",
            cmd.step,
            cmd.attempt,
            "passed" if ok else "failed",
            detail,
        )
        a = self.agent
        a.events.put(
            AgentEvent(
                kind="heal",
                job="heal",
                attempt=cmd.attempt,
                rank=0,
                step=cmd.step,
                ok=ok,
                why=detail[:4000],
            )
        )
        a._wake_ship.set()

    def _remediate(self, cmd: AgentCommand) -> str:
        a = self.agent
        end = time.monotonic() + TASKS_END_S
        while True:
            with a._lock:
                live = a.runner.live()
            if not live:
                break
            if time.monotonic() >= end:
                raise StepFailed(f"{len(live)} tasks still run on the node after {TASKS_END_S:g} s")
            time.sleep(0.2)
        if cmd.remedy == "command":  # the controller runs it as a node command (exec)
            raise StepFailed("the site's command is run as a node command, not as this step")
        reset = getattr(a.backend, "reset", None)
        if reset is None:
            raise StepFailed("this GPU backend cannot reset its GPUs: configure a site command")
        with a._gpu_lock:
            try:
                done = str(reset())
            except Exception as e:  # ResetFailed, or the backend's own error
                raise StepFailed(f"GPU reset failed: {e}") from None
            a.health.forget_xids()
        return done

    def _burn_in(self, cmd: AgentCommand) -> str:
        a = self.agent
        with a._gpu_lock:
            found = a.backend.discover()
            # what the XIDs before the remediation asked for is done; one that comes again
            # under the stress fails the burn-in
            a.health.forget_xids()
        expected = a.health.expected
        if len(found) < expected:
            raise StepFailed(f"{len(found)} of {expected} GPUs found after the remediation")
        probe = self._start_probe(cmd, found)
        net = self._spawn(self._net_argv(cmd)) if cmd.peer and cmd.net_port else None
        self._stress = True
        start = time.monotonic()
        try:
            while True:
                with a._gpu_lock:
                    samples = a.backend.sample(a.clock.now())
                # the agent's own checker: an XID its heartbeat took from the backend counts too
                h = a.health.check(samples)
                if not h.healthy:
                    raise StepFailed(f"under stress: {h.why}")
                took = time.monotonic() - start
                done = all(p is None or p.poll() is not None for p in (probe, net))
                if took >= cmd.burn_in_s and (done or took >= cmd.burn_in_s + PROBE_SLACK_S):
                    break
                time.sleep(SAMPLE_S)
        finally:
            self._stress = False
            for p in (probe, net):
                if p is not None and p.poll() is None:
                    p.kill()
        verdict = self._verdict(probe, "device layer")
        said = (
            f"{cmd.burn_in_s:g} s of stress on {len(found)} GPUs passed the health checks; "
            f"device layer: {len(verdict.get('passed', []))} passed, "
            f"{len(verdict.get('skipped', []))} skipped"
        )
        if net is not None:
            links = self._verdict(net, f"network with {cmd.peer}").get("passed", [])
            said += "; network: " + ", ".join(x.split(": ", 1)[-1] for x in links)
        return said

    def _net_argv(self, cmd: AgentCommand) -> list[str]:
        """This node's half (rank 0, which judges the link) of validate's net probe with the
        peer; the controller starts the peer's half as a node command on the peer."""
        return [
            "--node", self.agent.config.node, "--net-rank", "0",
            "--net-master", self.agent.config.address,
            "--net-port", str(cmd.net_port), "--net-peer", cmd.peer,
            "--net-seconds", f"{net_seconds(cmd.burn_in_s):g}",
            "--net-min-gbps", f"{cmd.net_min_gbps:g}",
            "--net-max-rtt-ms", f"{cmd.net_max_rtt_ms:g}",
        ]  # fmt: skip

    def _start_probe(self, cmd: AgentCommand, found: list[Any]) -> subprocess.Popen[str]:
        a = self.agent
        gpus = json.dumps([g.model_dump() for g in found])
        argv = [
            "--node", a.config.node, "--gpu-model", found[0].model if found else "",
            "--driver", a.backend.driver_version(), "--gpus", gpus,
            "--seconds", f"{cmd.burn_in_s:g}",
        ]  # fmt: skip
        return self._spawn(argv, a.backend.visible_devices([g.index for g in found]))

    def _spawn(self, args: list[str], devices: str = "") -> subprocess.Popen[str]:
        """``python -m gpufleet.ops.burnin ARGS`` with the agent's interpreter."""
        argv = [sys.executable, "-m", "gpufleet.ops.burnin", *args]
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": devices}
        try:
            return subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
        except OSError as e:
            raise StepFailed(f"the burn-in's probe could not start: {e}") from None

    def _verdict(self, probe: subprocess.Popen[str], what: str) -> dict[str, Any]:
        try:
            out, err = probe.communicate(timeout=PROBE_SLACK_S)
        except subprocess.TimeoutExpired:
            probe.kill()
            raise StepFailed(f"{what}: no answer within {PROBE_SLACK_S:g} s") from None
        for line in reversed(out.splitlines()):
            if line.startswith(MARKER):
                verdict: dict[str, Any] = json.loads(line[len(MARKER) :])
                if not verdict.get("ok"):
                    raise StepFailed(f"{what}: " + "; ".join(verdict.get("failed", []))[:3000])
                return verdict
        tail = err.strip().splitlines()[-1:] or [f"exit status {probe.returncode}"]
        raise StepFailed(f"{what}: no result: {tail[0][:300]}")
