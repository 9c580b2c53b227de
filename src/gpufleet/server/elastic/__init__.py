"""Elastic pools, live: the providers that make and release nodes (``command``: the site's
scripts, as Slurm's ResumeProgram and SuspendProgram; ``local``: agent processes with
simulated GPUs on this machine) and the executor that hands them the core's PowerUp and
PowerDown off the event loop (``executor.py``). The decisions are the core's
(``core/elastic/``)."""
