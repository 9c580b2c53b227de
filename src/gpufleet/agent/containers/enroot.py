"""enroot (what pyxis runs): ``enroot start`` of a container created from the image beforehand
(``enroot import`` + ``enroot create --name``, which the site's prolog or the user does; the
image names that container, or a .sqsh file that ``enroot start`` takes directly). enroot is
unprivileged: the runner starts it as the job's account. GPUs are those of NVIDIA_VISIBLE_DEVICES
(enroot's nvidia hook). Not exercised by a real runtime in the test suite: its argv is
unit-tested only."""

from __future__ import annotations

from gpufleet.agent.containers import ContainerTask, Runtime


class Enroot(Runtime):
    NAME = "enroot"
    BINARIES = ("enroot",)
    switches_user = True

    def argv(self, task: ContainerTask) -> list[str]:
        a = [self.binary, "start", "--env", "NVIDIA_VISIBLE_DEVICES"]
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
