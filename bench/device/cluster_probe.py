"""On a GPU machine: a controller and one agent on the NVML backend (no --simulate), a 1-GPU
torch job, /metrics. Writes cluster_probe.json, metrics.txt and both logs under $OUT.
``PROBE_SIMULATE=1xH200`` rehearses it on a machine without a GPU. BENCHMARKS.md, "A real H200".
"""

import json
import os
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from gpufleet.api.schemas import TokenCreate
from gpufleet.base.secretfile import write_secret
from gpufleet.ops.localcluster import LocalCluster, _kill_group, _reap

OUT = Path(os.environ.get("OUT", "/tmp/out"))
SIM = os.environ.get("PROBE_SIMULATE", "")  # local rehearsal only
res: dict[str, Any] = {"errors": [], "simulated": SIM}
data = Path("/tmp/gfc")
shutil.rmtree(data, ignore_errors=True)
c = LocalCluster(data_dir=data, agents=0, heartbeat_s=1.0, schedule_interval_s=0.5)
agent: subprocess.Popen[bytes] | None = None


def wait(what: str, f: Callable[[], Any], t: float) -> Any:
    end = time.monotonic() + t
    last = None
    while time.monotonic() < end:
        try:
            v = f()
            if v:
                return v
            last = v
        except Exception as e:
            last = repr(e)
        time.sleep(0.3)
    raise TimeoutError(f"{what} not within {t}s (last {last})")


try:
    t0 = time.monotonic()
    c.start_controller()
    res["controller_up_s"] = round(time.monotonic() - t0, 2)
    with c.admin() as a:
        tok = a.create_token(TokenCreate(name="agent-gpu0", role="agent", node="gpu0")).token
    tf = write_secret(data / "gpu0.token", tok or "", replace=True)
    args = [
        sys.executable,
        "-m",
        "gpufleet.agent",
        "--controller",
        c.url,
        "--token-file",
        str(tf),
        "--name",
        "gpu0",
        "--data-dir",
        str(data / "gpu0"),
        "--heartbeat-s",
        "1",
        "--poll-wait-s",
        "5",
        "--address",
        "127.0.0.1",
        "--expected-gpus",
        "1",
        "--no-access-check",  # its jobs run as the probe's own account
    ]
    if SIM:
        args += ["--simulate", SIM]
    agent = subprocess.Popen(
        args,
        stdout=(data / "agent.log").open("ab"),
        stderr=subprocess.STDOUT,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
        start_new_session=True,
    )
    t0 = time.monotonic()

    def node() -> Any:
        assert agent is not None
        if agent.poll() is not None:
            raise SystemExit(f"agent exited {agent.returncode}")
        with c.admin() as a:
            ns = [n for n in a.nodes() if n.name == "gpu0" and n.state != "lost"]
            return ns[0] if ns else None

    n = wait("node gpu0 registered", node, 60)
    res["register_s"] = round(time.monotonic() - t0, 2)
    res["node"] = n.model_dump()
    print(
        "NODE", n.name, n.state, n.gpu_model, n.gpus, n.driver_version, n.cuda_version, flush=True
    )
    code = (
        "import os, torch; x=torch.randn(8192,8192,device='cuda'); "
        "print(torch.cuda.get_device_name(), (x@x).sum().item(), "
        "os.environ['CUDA_VISIBLE_DEVICES'])"
    )
    if SIM:
        code = "import os; print('sim', os.environ.get('CUDA_VISIBLE_DEVICES'))"
    alice = c.user("alice")
    t0 = time.monotonic()
    (job,) = alice.submit(
        {
            "name": "h200",
            "gpus_per_worker": 1,
            "command": [sys.executable, "-c", code],
            "time_limit_s": 120,
        }
    )

    def done() -> Any:
        j = alice.job(job)
        return j if j.state in ("SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT") else None

    j = wait("job ended", done, 90)
    res["job_s"] = round(time.monotonic() - t0, 2)
    res["job"] = j.model_dump(mode="json")
    print("JOB", job, j.state, flush=True)
    for stream in ("stdout", "stderr"):
        try:
            lo = wait(
                f"{stream} log",
                lambda s=stream: (x := alice.logs(job, stream=s)).complete and x,  # type: ignore[misc]
                20,
            )
            res[f"job_{stream}"] = lo.data
        except Exception as e:
            res[f"job_{stream}"] = repr(e)
    print(
        "STDOUT", res.get("job_stdout"), "\nSTDERR", str(res.get("job_stderr"))[-2000:], flush=True
    )
    time.sleep(2.5)  # a heartbeat or two with the job's metrics
    scrape = {"Authorization": f"Bearer {c.admin_token}"}  # /metrics needs a token
    m = httpx.get(c.url + "/metrics", headers=scrape, timeout=10).text
    (OUT / "metrics.txt").write_text(m)
    dcgm = [line for line in m.splitlines() if line.startswith("DCGM_")]
    res["metrics_dcgm_lines"] = dcgm
    print(f"METRICS: {len(m.splitlines())} lines, {len(dcgm)} DCGM_ lines")
    print("\n".join(dcgm[:80]))
    with c.admin() as a:
        res["node_after"] = [x.model_dump(mode="json") for x in a.nodes()]
except BaseException:
    res["errors"].append(traceback.format_exc())
    print(traceback.format_exc(), flush=True)
finally:
    if agent is not None:
        _kill_group(agent, 15)
        _reap(agent)
    c.stop()
    for name in ("controller.log", "agent.log"):
        p = data / name
        if p.exists():
            shutil.copy(p, OUT / name)
    (OUT / "cluster_probe.json").write_text(json.dumps(res, indent=1, default=str))
    print("ERRORS", res["errors"])
