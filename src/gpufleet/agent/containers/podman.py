"""podman (exercised by a real runtime in the test suite: Debian's podman 4.3 with runc).

``podman run`` stays in the foreground: its stdout and stderr are the task's logs, its exit
status the container's (125 when podman itself failed, 126/127 as a shell says). ``--init``
gives the task a PID 1 that passes SIGTERM on (podman proxies signals to the container), so a
cancel or a time limit stops the container; ``--rm`` removes it when it ends, and the runner
runs ``podman rm -f`` after a SIGKILL, which podman cannot pass on.
"""

from __future__ import annotations

import shutil

from gpufleet.agent.containers import OWNER_LABEL, ContainerTask, DockerCli, cdi_name


class Podman(DockerCli):
    NAME = "podman"
    BINARIES = ("podman",)

    def __init__(self, binary: str, oci_runtime: str | None = None) -> None:
        super().__init__(binary)
        # runc when the node has it: crun (Debian's default) fails on cgroup v1 kernels such as
        # this project's dev boxes, runc works on both; else podman's own default
        self.oci_runtime = (
            "runc" if oci_runtime is None and shutil.which("runc") else (oci_runtime or "")
        )

    def argv(self, task: ContainerTask) -> list[str]:
        a = [self.binary, "run", "--rm", "--init", "--name", task.name]
        if task.owner:
            a += ["--label", f"{OWNER_LABEL}={task.owner}"]
        if self.oci_runtime:
            a += ["--runtime", self.oci_runtime]
        a += ["--user", f"{task.uid}:{task.gid}"]
        if task.rootless:
            a += ["--userns=keep-id"]
        a += ["--network", "host", "--ipc", "host", "--security-opt", "no-new-privileges"]
        a += ["--env-file", task.env_file]
        if task.cidfile:
            a += ["--cidfile", task.cidfile]
        if task.stdin:
            a += ["--interactive"]
        for name, soft, hard in task.ulimits:
            a += ["--ulimit", f"{name}={soft}:{hard}"]
        if task.tmp:
            a += ["--mount", f"type=bind,source={task.tmp},target=/tmp"]
        for m in task.mounts:
            a += ["--mount", f"type=bind,source={m.source},target={m.target}" + _ro(m.read_only)]
        if task.workdir:
            a += ["--workdir", task.workdir]
        if task.cdi:
            names = [cdi_name(r) for r in task.devices] or [str(g) for g in task.gpus]
            a += [x for n in names for x in ("--device", f"nvidia.com/gpu={n}")]
        else:
            a += [x for d in task.device_nodes for x in ("--device", d)]
        return [*a, "--", task.image, *task.command]

    def cleanup_argv(self, name: str) -> list[str]:
        return [self.binary, "rm", "--force", "--time", "0", "--ignore", name]


def _ro(read_only: bool) -> str:
    return ",ro=true" if read_only else ""
