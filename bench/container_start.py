"""What running a task in a container costs at launch: the agent's runner (as root) starting
``/bin/true`` as the account ``--account`` bare (a mount namespace with a private /tmp, then
setpriv), against the same command in a container of ``--image`` with podman and runc
(``podman run --rm --init``, the job's uid, an env file). Prints the median and p90
milliseconds from ``launch()`` to the reaped exit over ``--n`` launches each, the bare ones
first; the image must exist (tests/containerimage.py builds the test suite's). Each also as a
batch script with its output file in a submit directory the account owns (sbatch's
``slurm-%j.out``): behind taskstart, which opens it as the account (for podman: with the
account's effective ids, then starts the runtime as root) and copies the output; the container
also asks podman for the image's environment (kept a minute: the first launch pays it).

    sudo .venv/bin/python bench/container_start.py [--n 10] [--image localhost/gpufleet-test:2]
"""

from __future__ import annotations

import argparse
import os
import pwd
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from gpufleet.agent.containers.podman import Podman
from gpufleet.agent.runner import TaskRunner
from gpufleet.api.schemas import AgentCommand
from gpufleet.model.container import ContainerSpec


def one(r: TaskRunner, job: str, run_as: str, image: str, submit: str) -> float:
    container = ContainerSpec(image).to_dict() if image else None
    batch = {"role": "batch", "workdir": submit, "output": f"slurm-{job}.out"} if submit else {}
    cmd = AgentCommand(
        kind="launch",
        job=job,
        attempt=0,
        rank=0,
        command=["/bin/true"],
        run_as=run_as,
        container=container,
        **batch,  # type: ignore[arg-type]
    )
    t0 = time.perf_counter()
    [ev] = r.launch(cmd)
    if ev.kind != "started":
        raise SystemExit(f"launch refused: {ev.why}")
    while not (evs := r.poll()):
        time.sleep(0.001)
    if evs[0].exit_code != 0:
        err = r.log_paths(evs[0].key)[1].read_text()[-500:]
        raise SystemExit(f"exited {evs[0].exit_code}: {evs[0].why}\n{err}")
    return (time.perf_counter() - t0) * 1000


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=10)
    p.add_argument("--account", default="nobody", help="the job's account (must exist)")
    p.add_argument("--image", default="localhost/gpufleet-test:2")
    a = p.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root: a root agent runs podman and switches accounts")
    rt = Podman.detect()
    if rt is None:
        raise SystemExit("podman is not installed")
    who = pwd.getpwnam(a.account)
    # not under /tmp: a bare task has a /tmp of its own, where the directory does not exist
    top = tempfile.mkdtemp(prefix="gpufleet-bench-", dir="/var/tmp")
    try:
        os.chmod(top, 0o755)
        submit = Path(top, "submit")
        submit.mkdir()
        os.chown(submit, who.pw_uid, who.pw_gid)
        r = TaskRunner(Path(top, "data"), lambda gpus: "", container_runtime=rt)
        rows = (
            ("bare", "", ""),
            ("bare batch (slurm-%j.out)", "", str(submit)),
            (f"podman+runc {a.image}", a.image, ""),
            ("podman+runc batch (slurm-%j.out)", a.image, str(submit)),
        )
        for k, (label, image, where) in enumerate(rows):
            ms = sorted(one(r, f"b{k}-{i}", a.account, image, where) for i in range(a.n))
            p90 = ms[int(0.9 * (len(ms) - 1))]
            print(f"{label:40} median {statistics.median(ms):7.1f} ms  p90 {p90:7.1f} ms")
    finally:
        shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    main()
