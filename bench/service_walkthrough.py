"""The issue's commands for containers, services and secrets, end to end, on a real local
cluster (a controller and 2 agents, HAProxy, podman + runc): a secret made, listed, used by a
container job and removed; a job from ``#SBATCH --container-image``; a service in a container
with its endpoint and token; a rolling update by ``--image`` polled through the endpoint (its
failed requests counted); scale; a new token (the old one tried at once); rm.

Run from the repository root as root (podman runs the containers as the jobs' users):

    sudo .venv/bin/python bench/service_walkthrough.py /tmp/walk

Prints each command with its output; exits non-zero when a step does not hold.
"""

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, "tests")
from containerimage import build_image  # type: ignore[import-not-found]  # tests/, at run time
from gpufleet.api.schemas import TokenCreate
from gpufleet.ops.localcluster import LocalCluster

WEB = """\
kind: service
name: web
replicas: 2
replica:
  container: {image: localhost/gpufleet-test:2}
  command:
    - sh
    - -c
    - mkdir -p /tmp/w && echo v1 > /tmp/w/index.html && exec httpd -f -p $PORT -h /tmp/w
readiness: {http: {path: /index.html}, period_s: 1}
liveness: {tcp: {}, period_s: 1}
"""
JOB = """\
#!/bin/sh
#SBATCH --container-image=localhost/gpufleet-test:2
#SBATCH --container-workdir=/tmp
#SBATCH --gpus=1
pwd; echo CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES
"""


def until(what: str, check: Any, timeout_s: float = 120) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (got := check()):
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.2)  # real processes start: real time passes
    return got


def main(base: Path) -> None:
    base.mkdir(parents=True, exist_ok=True)
    image = build_image()
    subprocess.run(["podman", "tag", image, "localhost/gpufleet-test:2"], check=True)
    c = LocalCluster(base / "cluster", agents=2, gateway="haproxy").start()
    try:
        c.wait_nodes(2)
        with c.admin() as a:
            tok = a.create_token(TokenCreate(name="walk", role="user", user="alice")).token
        env = dict(os.environ, GPUFLEET_SERVER=c.url, GPUFLEET_TOKEN=tok or "", COLUMNS="160")

        def run(argv: list[str], stdin: str | None = None) -> str:
            p = subprocess.run(argv, env=env, input=stdin, capture_output=True, text=True, cwd=base)
            print(
                f"$ {' '.join(argv[2:] if argv[0] == sys.executable else argv)}  -> {p.returncode}"
            )
            print(p.stdout + p.stderr)
            assert p.returncode == 0, p
            return p.stdout

        def g(*args: str, stdin: str | None = None) -> str:
            return run([sys.executable, "-m", "gpufleet.cli.main", *args], stdin)

        g("secret", "create", "api-key", stdin="s3cret-value\n")
        assert "api-key" in g("secret", "ls")
        check = 'test "$API_KEY" = s3cret-value'
        first = g(
            "submit", "--secret", "api-key:API_KEY", "--image", "localhost/gpufleet-test:2",
            "--", "sh", "-c", check,
        ).split()[-1]  # fmt: skip
        (base / "job.sh").write_text(JOB)
        g("slurm-shims", "install", str(base / "bin"))
        batch = run([str(base / "bin" / "sbatch"), str(base / "job.sh")]).split()[-1]
        with c.client(tok) as cl:
            done = ("SUCCEEDED", "FAILED", "CANCELLED")
            for j in (first, batch):
                state = until(f"job {j} ended", lambda j=j: (s := cl.job(j).state) in done and s)
                print(f"job {j}: {state}")
                assert state == "SUCCEEDED", j

        (base / "web.yaml").write_text(WEB)
        out = g("service", "run", "-f", str(base / "web.yaml"))
        url = next(line.split()[1] for line in out.splitlines() if line.startswith("endpoint:"))
        token = next(line.split()[1] for line in out.splitlines() if line.startswith("token:"))

        def get(bearer: str | None = token) -> tuple[int, str]:
            headers = {"Authorization": f"Bearer {bearer}"} if bearer else {}
            r = urllib.request.Request(url + "/index.html", headers=headers)
            try:
                with urllib.request.urlopen(r, timeout=5) as x:
                    return x.status, x.read().decode().strip()
            except urllib.error.HTTPError as e:
                return e.code, ""
            except OSError as e:
                return 0, str(e)

        until("v1 through the endpoint", lambda: get() == (200, "v1"))
        print("through the endpoint:", get(), "; without the token:", get(None)[0])
        assert get(None)[0] == 401
        g("service", "ls")
        g("service", "show", "web")

        g("service", "update", "web", "--image", "localhost/gpufleet-test:2")
        sent = failed = 0
        t0 = time.monotonic()
        with c.client(tok) as cl:
            while True:
                status, _ = get()
                sent += 1
                failed += status != 200
                s = cl.service("web")
                if (
                    s.generation == 2
                    and not s.rolling_out
                    and s.ready == 2
                    and all(r.generation == 2 for r in s.replicas)
                ):
                    break
                assert time.monotonic() - t0 < 180, s
        took = time.monotonic() - t0
        print(f"rolled out by --image to {s.image} in {took:.1f} s: {failed} of {sent} failed")
        assert failed == 0

        g("service", "scale", "web", "3")
        g("service", "token", "web")
        old = get()[0]
        print("the old token right after the rotation:", old)
        assert old == 401
        g("service", "rm", "web")
        g("secret", "rm", "api-key")
        assert "api-key" not in g("secret", "ls")
    finally:
        c.stop()


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/gpufleet-walk"))
