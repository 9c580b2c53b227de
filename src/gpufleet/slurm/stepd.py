"""The step daemon: what every rank but the first of a batch job runs, holding its node.

A placeholder: it only waits until SIGTERM and exits 0 (the srun work replaces it with the
daemon that serves ``srun``). ``python -m gpufleet.slurm.stepd``, no arguments."""

from __future__ import annotations

import signal
import sys


def main() -> int:
    got: list[int] = []
    signal.signal(signal.SIGTERM, lambda sig, _frame: got.append(sig))
    while not got:
        signal.pause()
    return 0


if __name__ == "__main__":
    sys.exit(main())
