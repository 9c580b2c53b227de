"""Runs ``gpufleet.benchmarks.las_preempt`` (its docstring says what it measures and how)."""

from gpufleet.benchmarks.las_preempt import main

if __name__ == "__main__":
    raise SystemExit(main())
