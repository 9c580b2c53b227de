"""Slurm's commands inside a gpufleet job: the step daemon (``stepd``) and what runs on it."""
