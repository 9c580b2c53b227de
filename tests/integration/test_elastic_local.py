"""An elastic pool with the ``local`` provider, live: real controller and agent processes.

A gang that only the pool's max can hold is accepted (not refused as never fitting), pends
with the PoolGrowing Reason, the controller starts two agents for it (they register
themselves), the job runs and ends, and once idle for ``suspend_after_s`` the nodes are
released: ``gpufleet nodes`` and ``sinfo`` show them powered down (``idle~``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.api.schemas import TokenCreate
from gpufleet.base.secretfile import write_secret
from gpufleet.client import ApiError
from gpufleet.ops.localcluster import LocalCluster
from support.waiting import wait_for

CLUSTER = """
name: burst
pools:
  - name: burst
    gpu_model: H100-SXM
    gpus: 8
    cpu_cores: 8
    memory_gib: 32
    elastic: {min: 0, max: 3, provider: local, resume_timeout_s: 120, suspend_after_s: 2}
"""
GANG = {"name": "gang", "workers": 2, "gpus_per_worker": 8, "command": ["true"]}


def _cli(c: LocalCluster, *args: str) -> str:
    env = dict(os.environ, GPUFLEET_SERVER=c.url, GPUFLEET_TOKEN=c.admin_token)
    out = subprocess.run(
        [sys.executable, "-m", "gpufleet.cli", *args], env=env, capture_output=True, check=True
    )
    return out.stdout.decode()


def test_a_gang_grows_the_local_pool_runs_and_its_idle_nodes_power_down(tmp_path: Path) -> None:
    spec = tmp_path / "cluster.yaml"
    spec.write_text(CLUSTER)
    c = LocalCluster(tmp_path, agents=0, gateway="off", cluster_spec=spec)
    try:
        c.start()
        with c.admin() as admin:
            nodes = {n.name: n.state for n in admin.nodes()}
            assert nodes == dict.fromkeys(("burst-000", "burst-001", "burst-002"), "powered_down")
            # too big for one node and for the nodes up (none): accepted, as the max holds it
            # beyond the max: refused at submit, in sbatch's words
            with pytest.raises(ApiError) as refused:
                admin.submit({**GANG, "workers": 4, "user": "alice"})
            assert refused.value.status == 422
            assert "Requested node configuration is not available" in str(refused.value)
            (job,) = admin.submit({**GANG, "user": "alice"})
            first = wait_for("a Reason", lambda: admin.job(job).reason)
            assert first.code == "PoolGrowing", first
            assert "2 nodes powering up" in first.message
            done = wait_for(
                "the gang ran on the new nodes",
                lambda: (j := admin.job(job)).state == "SUCCEEDED" and j,
                timeout_s=120,
            )
            assert done.attempt == 1  # started once, on nodes that had registered
            # idle past suspend_after_s: released, and their agents stopped
            wait_for(
                "the idle nodes powered down",
                lambda: all(n.state == "powered_down" for n in admin.nodes()),
                timeout_s=60,
            )
        rows = json.loads(_cli(c, "nodes", "--json"))
        assert {r["state"] for r in rows} == {"powered_down"}
        sinfo = subprocess.run(
            [sys.executable, "-m", "gpufleet.shims.sinfo", "-h", "-o", "%t %D"],
            env=dict(os.environ, GPUFLEET_SERVER=c.url, GPUFLEET_TOKEN=c.admin_token),
            capture_output=True,
            check=True,
        ).stdout.decode()
        assert sinfo.split() == ["idle~", "3"]
    finally:
        c.stop()


FAILING = """
name: burst
pools:
  - name: burst
    gpu_model: H100-SXM
    gpus: 8
    cpu_cores: 8
    memory_gib: 32
    elastic:
      max: 2
      provider: {name: command, resume: RESUME, suspend: /bin/true}
"""


def test_a_resume_script_that_fails_marks_its_nodes_failed(tmp_path: Path) -> None:
    called = tmp_path / "called"
    script = tmp_path / "resume.sh"
    script.write_text(
        f'#!/bin/sh\necho "$GPUFLEET_POOL $1" >> {called}\necho no quota >&2\nexit 3\n'
    )
    script.chmod(0o755)
    spec = tmp_path / "cluster.yaml"
    spec.write_text(FAILING.replace("RESUME", str(script)))
    c = LocalCluster(tmp_path, agents=0, gateway="off", cluster_spec=spec)
    try:
        c.start()
        with c.admin() as admin:
            admin.submit({**GANG, "user": "alice"})
            failed = wait_for(
                "both nodes failed",
                lambda: (ns := admin.nodes()) and all(n.state == "power_failed" for n in ns) and ns,
                timeout_s=60,
            )
            assert "exited 3: no quota" in failed[0].why
            # Slurm's ResumeProgram argument: the nodes as a hostlist expression
            assert called.read_text().split() == ["burst", "burst-[000-001]"]
            # an admin's resume lets the pool use the node again
            back = admin.resume("burst-000")
            assert back.state == "powered_down"  # the gang needs two: one alone is not asked for
    finally:
        c.stop()


SCRIPTED = """
name: burst
pools:
  - name: burst
    gpu_model: H100-SXM
    gpus: 8
    cpu_cores: 8
    memory_gib: 32
    elastic:
      max: 1
      suspend_after_s: 2
      provider: {name: command, resume: RESUME, suspend: SUSPEND}
"""


def test_the_command_provider_starts_a_node_whose_agent_registers_and_stops_it(
    tmp_path: Path,
) -> None:
    """The site's scripts as Slurm's ResumeProgram and SuspendProgram: the resume script boots
    "the machine" (here an agent process, with the token the admin made for its node), which
    registers itself; the suspend script stops it once the node has been idle."""
    resume, suspend = tmp_path / "resume.sh", tmp_path / "suspend.sh"
    agent = f"{sys.executable} -m gpufleet.agent --controller $URL --token-file {tmp_path}/$1.token"
    resume.write_text(
        "#!/bin/sh\n"
        f"setsid {agent} --name $1 --simulate 8xH100-SXM --cpus 8 --memory-gib 32 "
        f"--data-dir {tmp_path}/$1 --heartbeat-s 1 --no-access-check > {tmp_path}/$1.log 2>&1 &\n"
        f"echo $! > {tmp_path}/$1.pid\n"
    )
    suspend.write_text(
        f"#!/bin/sh\necho $1 >> {tmp_path}/suspended\nkill $(cat {tmp_path}/$1.pid)\n"
    )
    for s in (resume, suspend):
        s.chmod(0o755)
    spec = tmp_path / "cluster.yaml"
    spec.write_text(SCRIPTED.replace("RESUME", str(resume)).replace("SUSPEND", str(suspend)))
    c = LocalCluster(tmp_path, agents=0, gateway="off", cluster_spec=spec)
    try:
        c.start()
        resume.write_text(resume.read_text().replace("$URL", c.url))
        with c.admin() as admin:
            tok = admin.create_token(TokenCreate(name="burst-000", role="agent", node="burst-000"))
            write_secret(tmp_path / "burst-000.token", tok.token or "")
            (job,) = admin.submit({**GANG, "workers": 1, "user": "alice"})
            wait_for(
                "the job ran on the scripted node",
                lambda: admin.job(job).state == "SUCCEEDED",
                timeout_s=120,
            )
            wait_for(
                "the node released by the suspend script",
                lambda: (
                    (tmp_path / "suspended").exists()
                    and [n.state for n in admin.nodes()] == ["powered_down"]
                ),
                timeout_s=60,
            )
        assert (tmp_path / "suspended").read_text().split() == ["burst-000"]
    finally:
        c.stop()
