"""``scontrol show hostnames [LIST]`` inside a job: one node name a line (the list defaults
to ``$SLURM_JOB_NODELIST``), as scripts use it to find their nodes. Nothing else of scontrol:
the controller's own views are ``gpufleet`` commands."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from gpufleet.model.hostlist import expand

OTHER = (
    "scontrol: error: gpufleet's scontrol does only 'show hostnames [LIST]'; for jobs, nodes "
    "and queues use gpufleet's commands (gpufleet jobs, gpufleet nodes, …)"
)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    words = [a for a in args if not a.startswith("-")]
    if len(words) < 2 or words[0] != "show" or words[1].lower() not in ("hostnames", "hostname"):
        print(OTHER, file=sys.stderr)
        return 1
    if len(words) > 3:
        print("scontrol: error: show hostnames takes one hostlist", file=sys.stderr)
        return 1
    text = words[2] if len(words) == 3 else os.environ.get("SLURM_JOB_NODELIST", "")
    if not text:
        print(
            "scontrol: error: no hostlist given and SLURM_JOB_NODELIST is not set", file=sys.stderr
        )
        return 1
    try:
        names = expand(text)
    except ValueError as e:
        print(f"scontrol: error: {e}", file=sys.stderr)
        return 1
    sys.stdout.write("".join(f"{n}\n" for n in names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
