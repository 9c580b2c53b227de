"""docker: the same shape as podman's command line (``docker run`` in the foreground, signals
proxied, ``--rm``), GPUs with ``--gpus device=…`` (the NVIDIA container toolkit; a MIG device
by its UUID). Not exercised by a real runtime in the test suite: its argv is unit-tested only."""

from __future__ import annotations

from gpufleet.agent.containers import OWNER_LABEL, ContainerTask, DockerCli
from gpufleet.agent.containers.podman import _ro


class Docker(DockerCli):
    NAME = "docker"
    BINARIES = ("docker",)

    def argv(self, task: ContainerTask) -> list[str]:
        a = [self.binary, "run", "--rm", "--init", "--name", task.name]
        if task.owner:
            a += ["--label", f"{OWNER_LABEL}={task.owner}"]
        a += ["--user", f"{task.uid}:{task.gid}"]
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
        if task.gpus:
            # a whole GPU by its index, a MIG device by its MIG-… UUID (the NVIDIA container
            # toolkit takes both)
            names = [r.uuid if r.mig is not None else str(r.parent) for r in task.devices]
            # the quotes are part of the value: docker splits --gpus at commas otherwise
            a += ["--gpus", '"device=' + ",".join(names or [str(g) for g in task.gpus]) + '"']
        return [*a, "--", task.image, *task.command]

    def cleanup_argv(self, name: str) -> list[str]:
        return [self.binary, "rm", "--force", name]
