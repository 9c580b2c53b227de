"""Slurm's in-job commands: ``srun`` (a job step across the allocation), the per-node step
daemon that serves it (``stepd``) and ``scontrol show hostnames``. Standard library only: these
run inside users' jobs with the agent's Python."""
