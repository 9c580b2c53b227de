"""Runs ``gpufleet.benchmarks.srun_launch`` (its docstring says what it measures and how)."""

from gpufleet.benchmarks.srun_launch import main

if __name__ == "__main__":
    raise SystemExit(main())
