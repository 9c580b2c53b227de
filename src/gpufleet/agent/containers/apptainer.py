"""Apptainer (and SingularityCE, the same command line): ``exec --nv`` binds the host's NVIDIA
driver and devices, and ``--containall`` keeps the host's home, /tmp and environment out.
Apptainer runs unprivileged as whoever starts it, so the runner starts it as the job's account
(the bare runner's setpriv switch) and the uid needs no flag. The environment comes from the
runner's process environment via ``--cleanenv`` plus ``--env-file`` (never the argv). Not
exercised by a real runtime in the test suite: its argv is unit-tested only."""

from __future__ import annotations

from gpufleet.agent.containers import ContainerTask, Runtime


class Apptainer(Runtime):
    NAME = "apptainer"
    BINARIES = ("apptainer",)
    # the runtime runs as the job's account itself (the runner wraps it with setpriv)
    switches_user = True
    # --nv binds every GPU of the node: the job's are named in CUDA_VISIBLE_DEVICES (UUIDs)
    own_gpus_only = False

    def argv(self, task: ContainerTask) -> list[str]:
        a = [self.binary, "exec", "--containall", "--cleanenv", "--env-file", task.env_file]
        if task.gpus:
            a += ["--nv"]
        if task.tmp:
            a += ["--bind", f"{task.tmp}:/tmp"]
        for m in task.mounts:
            a += ["--bind", f"{m.source}:{m.target}" + (":ro" if m.read_only else "")]
        if task.workdir:
            a += ["--pwd", task.workdir]
        return [*a, _uri(task.image), *task.command]


class Singularity(Apptainer):
    NAME = "singularity"
    BINARIES = ("singularity",)


def _uri(image: str) -> str:
    """pyxis's docker://REGISTRY#IMAGE form in apptainer's (docker://REGISTRY/IMAGE); a path
    (.sif, a sandbox directory) or another URI as it is."""
    if image.startswith("docker://") and "#" in image:
        return image.replace("#", "/", 1)
    if "://" in image or image.startswith("/"):
        return image
    return f"docker://{image}"
