"""enroot (what pyxis runs): ``enroot start`` of a container created from the image beforehand
(``enroot import`` + ``enroot create --name``, which the site's prolog or the user does; the
image names that container, or a .sqsh file that ``enroot start`` takes directly). enroot is
unprivileged: the runner starts it as the job's account. enroot gives the container the image's
environment and only the host variables ``--env NAME`` names (enroot-switchroot starts from its
env file), so every name of the task's environment is passed (the values come from enroot's own
process environment, which is the task's: never on the argv). GPUs are those of
NVIDIA_VISIBLE_DEVICES (enroot's nvidia hook: nvidia-container-cli ``--device``), which the
runner sets to the job's own ("void": none). Not exercised by a real runtime in the test suite:
its argv is unit-tested only."""

from __future__ import annotations

from gpufleet.agent.containers import ContainerTask, Runtime


class Enroot(Runtime):
    NAME = "enroot"
    BINARIES = ("enroot",)
    switches_user = True
    gpus_by_env = True

    def argv(self, task: ContainerTask) -> list[str]:
        a = [self.binary, "start"]
        for name in dict.fromkeys([*sorted(task.env_names), "NVIDIA_VISIBLE_DEVICES"]):
            a += ["--env", name]
        if task.tmp:
            a += ["--mount", f"{task.tmp}:/tmp"]
        for m in task.mounts:
            a += ["--mount", f"{m.source}:{m.target}" + (":ro" if m.read_only else "")]
        image = task.image.removeprefix("enroot://")
        a += [image]
        if task.workdir:
            # enroot start has no working directory option: the command starts there
            return [*a, "/bin/sh", "-c", 'cd "$0" && exec "$@"', task.workdir, *task.command]
        return [*a, *task.command]
